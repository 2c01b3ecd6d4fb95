"""One decoding step of a plain decoder stack, without ``model(...)``'s per-call machinery.

The hf engine (``rft_core.rollout.hf``) decodes one token per row per step, 48 steps for a
48-token response, and on a small model each step's arithmetic is short next to what a
transformers forward costs around it: the output-capturing wrappers, the causal mask, the
rotary embedding recomputed for every step, a module call per linear layer and norm. For the
causal LMs whose forward is exactly ``embed_tokens → rotary_emb → decoder layers → norm →
lm_head`` (``PLAIN_DECODERS``: no embedding scale, no logit soft-capping), ``DecodeStep`` runs
that step from the model's own weights:

- rotary cos/sin come from a table built once per ``generate`` call (static RoPE types only);
- where every layer is the plain Llama/Qwen2 layer (q/k/v/o projections, RMSNorm, gated MLP,
  no q/k norms), each layer is a few fused ops: one matrix multiply for q, k and v, one for the
  MLP's gate and up projections (weights concatenated once per call, since the trainer's new
  weights arrive between calls), ``rms_norm``; otherwise each decoder layer module is called;
- attention goes to ``shared_prefix_attention`` (``rft_core.rollout.shared_prefix``) through
  the KV cache, as in the model's forward.

The result is the model's arithmetic up to float rounding (tested against ``model(...)`` and a
teacher-forced forward in ``tests/core/rollout/test_rollout_hf.py``); ``DecodeStep.of`` returns None for
any other model, which keeps the generic forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

PLAIN_DECODERS = frozenset({"llama", "qwen2", "qwen3"})
_FUSED_LAYERS = frozenset({"llama", "qwen2"})  # qwen3 adds q/k norms: its layers run as modules
_STATIC_ROPE = frozenset({"default", "linear", "llama3"})  # cos/sin depend on the position only


def _cat(tensors: list[torch.Tensor | None]) -> torch.Tensor | None:
    if all(t is None for t in tensors):
        return None
    if any(t is None for t in tensors):
        raise ValueError("mixed biases")
    return torch.cat(tensors)  # type: ignore[arg-type]


def plain_layer(layer: Any) -> tuple[Any, Any, Any, Any] | None:
    """(attention, MLP, input norm, post-attention norm) of a plain Llama/Qwen2 decoder layer
    (q/k/v/o projections, gated MLP, RMSNorms, no q/k norms), or None for any other layer."""
    attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    needs = {
        attn: ("q_proj", "k_proj", "v_proj", "o_proj", "scaling"),
        mlp: ("gate_proj", "up_proj", "down_proj", "act_fn"),
        layer: ("input_layernorm", "post_attention_layernorm"),
    }
    if attn is None or mlp is None:
        return None
    if any(not hasattr(owner, name) for owner, names in needs.items() for name in names):
        return None
    if hasattr(attn, "q_norm") or hasattr(attn, "k_norm"):
        return None
    norms = (layer.input_layernorm, layer.post_attention_layernorm)
    if any(getattr(n, "variance_epsilon", None) is None for n in norms):
        return None
    return attn, mlp, *norms


@dataclass
class _FusedLayer:
    """A plain decoder layer's weights, q/k/v and gate/up concatenated."""

    module: Any  # the attention module (``layer_idx``, ``scaling`` for the attention function)
    input_norm: torch.Tensor
    post_norm: torch.Tensor
    eps: float
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None
    act: Callable[[torch.Tensor], torch.Tensor]

    @classmethod
    def of(cls, layer: Any) -> _FusedLayer | None:
        parts = plain_layer(layer)
        if parts is None:
            return None
        attn, mlp, *norms = parts
        try:
            qkv_bias = _cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
            gate_up_bias = _cat([mlp.gate_proj.bias, mlp.up_proj.bias])
        except ValueError:
            return None
        return cls(
            module=attn,
            input_norm=norms[0].weight,
            post_norm=norms[1].weight,
            eps=norms[0].variance_epsilon,
            qkv=torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
            qkv_bias=qkv_bias,
            o=attn.o_proj.weight,
            o_bias=attn.o_proj.bias,
            gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
            gate_up_bias=gate_up_bias,
            down=mlp.down_proj.weight,
            down_bias=mlp.down_proj.bias,
            act=mlp.act_fn,
        )


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE as transformers' ``apply_rotary_pos_emb`` (``rotate_half``): x [B, H, D]."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class DecodeStep:
    """One decoding step (one new token per row) on the engine's KV cache; see the module
    docstring. ``attention`` is the engine's decoding attention function."""

    def __init__(self, model: Any, positions: int, attention: Callable[..., Any]) -> None:
        self.model, self.inner = model, model.model
        self.attention = attention
        config = model.config
        self.layers = self.inner.layers[: config.num_hidden_layers]
        self.cos = self.sin = None
        rotary = self.inner.rotary_emb
        if getattr(rotary, "rope_type", None) in _STATIC_ROPE:
            weight = self.inner.embed_tokens.weight
            table = torch.arange(positions, device=weight.device)[None]
            cos, sin = rotary(weight[:1], table)
            self.cos, self.sin = cos[0], sin[0]
        self.fused: list[_FusedLayer] | None = None
        final_eps = getattr(self.inner.norm, "variance_epsilon", None)
        if config.model_type in _FUSED_LAYERS and self.cos is not None and final_eps is not None:
            fused = [_FusedLayer.of(layer) for layer in self.layers]
            if all(f is not None for f in fused):
                self.fused = fused  # type: ignore[assignment]
                self.final_eps = final_eps
                self.heads = config.num_attention_heads
                self.kv_heads = config.num_key_value_heads
                self.head_dim = getattr(config, "head_dim", None) or (
                    config.hidden_size // config.num_attention_heads
                )

    @classmethod
    def of(cls, model: Any, positions: int, attention: Callable[..., Any]) -> DecodeStep | None:
        """The step for ``model`` with rotary tables for positions ``< positions``, or None when
        the model is not one of ``PLAIN_DECODERS``."""
        inner = getattr(model, "model", None)
        parts = ("embed_tokens", "layers", "norm", "rotary_emb")
        if getattr(model.config, "model_type", None) not in PLAIN_DECODERS:
            return None
        if not hasattr(model, "lm_head") or not all(hasattr(inner, p) for p in parts):
            return None
        return cls(model, positions, attention)

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        """Last-position logits [B, V] fp32 of ``input_ids`` [B, 1] at ``positions`` [B, 1]."""
        if self.fused is not None:
            return self._fused_step(input_ids, positions, cache)
        hidden = self.inner.embed_tokens(input_ids)
        if self.cos is None:
            rotary = self.inner.rotary_emb(hidden, positions)
        else:
            rotary = (self.cos[positions], self.sin[positions])
        for layer in self.layers:
            hidden = layer(
                hidden,
                attention_mask=None,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                position_embeddings=rotary,
            )
        return self.model.lm_head(self.inner.norm(hidden[:, -1])).float()

    def _fused_step(
        self, input_ids: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        batch = input_ids.shape[0]
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        split = (heads * dim, kv_heads * dim, kv_heads * dim)
        cos, sin = self.cos[positions], self.sin[positions]  # [B, 1, D]: broadcast over heads
        x = F.embedding(input_ids[:, 0], self.inner.embed_tokens.weight)  # [B, hidden]
        for index, layer in enumerate(self.fused or ()):
            h = F.rms_norm(x, x.shape[-1:], layer.input_norm, layer.eps)
            q, k, v = F.linear(h, layer.qkv, layer.qkv_bias).split(split, dim=-1)
            q = apply_rope(q.view(batch, heads, dim), cos, sin)
            k = apply_rope(k.view(batch, kv_heads, dim), cos, sin)
            keys, values = cache.layers[index].update(
                k.unsqueeze(2), v.view(batch, kv_heads, 1, dim)
            )
            out, _ = self.attention(
                layer.module, q.unsqueeze(2), keys, values, None, scaling=layer.module.scaling
            )
            x = x + F.linear(out.reshape(batch, -1), layer.o, layer.o_bias)
            h = F.rms_norm(x, x.shape[-1:], layer.post_norm, layer.eps)
            gate, up = F.linear(h, layer.gate_up, layer.gate_up_bias).chunk(2, dim=-1)
            x = x + F.linear(layer.act(gate) * up, layer.down, layer.down_bias)
        x = F.rms_norm(x, x.shape[-1:], self.inner.norm.weight, self.final_eps)
        return self.model.lm_head(x).float()
