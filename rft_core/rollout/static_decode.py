"""Static-cache decoding for the hf engine on CUDA: a preallocated KV cache and one decoding step
(sample the next token, record it with its log-prob, test for the end, run the new token through
the model) captured as a CUDA graph and replayed, as vLLM and SGLang do for their decode steps.

Why our own step rather than ``model.generate(cache_implementation="static")`` under
``torch.compile``: the engine needs the log-prob of each sampled token under its convention, a
private RNG, per-row response budgets, and rows that finish early to stop costing work, none of
which ``generate`` gives; and capturing plain PyTorch ops with ``torch.cuda.CUDAGraph`` costs a
second, where compiling the model costs minutes.

Layout. Each decoding row (a prompt's sample) owns a slice of a KV buffer ``[rows, kv_heads,
positions, head_dim]`` per layer. The prefill runs each distinct prompt once (left-padded with
the others, plain transformers forward) and copies its keys and values into the columns
``[0, P)`` of each of its rows; decoding step ``t`` writes column ``P + t``. Attention reads
the columns ``[0, L)`` under a per-row mask (prompt padding, columns not yet written), ``L`` the
step's length bucket (a multiple of ``LENGTH_STEP``), so a step reads the cache it needs, not
the whole buffer.

Graphs. One graph per (rows bucket, length bucket, sampling mode). Row buckets are powers of two
from ``MIN_ROWS``; the buffers, and so the graphs, persist across calls while the shapes fit,
and are dropped by ``release_memory`` (colocate frees them while the trainer steps). Every
``CHECK_EVERY`` steps the host reads how many rows are still going: none left ends the call;
when the survivors fit a smaller bucket they are moved to the front of the buffers and the
smaller bucket's graphs take over, so finished rows stop costing a full step.

Sampling in the step: greedy is argmax; otherwise the exponential-race form of sampling
(``argmax(logits / T - log E)``, ``E ~ Exp(1)``, equal in law to drawing from the softmax) on
the top-k / top-p filtered logits (``rft_core.rollout.sampling.filter_logits``). ``E`` is drawn
outside the graph from the engine's private ``torch.Generator``, one kernel a step. Log-probs
follow the engine's convention (``rft_core.modeling.token_logprobs``: fp32, before filtering).

Which models: the plain Llama/Qwen2 decoder stacks with static RoPE and full attention
(``StaticDecoder.of`` returns None for any other, and the engine keeps its generic path). The
same step runs eagerly on CPU (no graphs), which is how the tests check it against the generic
path token for token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers.cache_utils import DynamicCache

from rft_core.modeling import full_attention_cache, token_logprobs
from rft_core.rollout.decode_step import apply_rope, plain_layer
from rft_core.rollout.sampling import filter_logits

log = logging.getLogger(__name__)

MIN_ROWS = 8
LENGTH_STEP = 64
CHECK_EVERY = 16  # decoding steps between the host's looks at how many rows are left
_PLAIN_MODELS = frozenset({"llama", "qwen2"})
_STATIC_ROPE = frozenset({"default", "linear", "llama3"})


def rows_bucket(rows: int) -> int:
    """The smallest power of two ≥ ``rows`` and ≥ ``MIN_ROWS``."""
    bucket = MIN_ROWS
    while bucket < rows:
        bucket *= 2
    return bucket


def _round_up(n: int, step: int) -> int:
    return -(-n // step) * step


@dataclass(frozen=True)
class Sampling:
    """What a graph bakes in: greedy or not, the filters, whether EOS ends a row."""

    greedy: bool
    top_k: int
    top_p: float
    ignore_eos: bool

    @property
    def filtered(self) -> bool:
        return not self.greedy and (self.top_k > 0 or 0.0 < self.top_p < 1.0)


@dataclass
class RowResult:
    tokens: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (EOS) or "length"


@dataclass
class _Layer:
    """The modules one plain decoder layer's step reads its weights from (live parameters, so a
    weight update in place is seen by captured graphs without a recapture).

    ``fuse`` lays the q, k and v projections' weights (and biases) out as consecutive rows of
    one tensor, and the MLP's gate and up projections' likewise, and makes each parameter a
    view into it: the step then runs two matrix products where it ran five (on an H200 the
    small ones ran at a third of the memory bandwidth), the model's own forward and in-place
    weight updates (``load_weights``) see the same storage, and no memory is added."""

    attn: Any
    mlp: Any
    input_norm: Any
    post_norm: Any
    qkv: torch.Tensor | None = None
    qkv_bias: torch.Tensor | None = None
    gate_up: torch.Tensor | None = None

    @classmethod
    def of(cls, layer: Any) -> _Layer | None:
        parts = plain_layer(layer)
        return None if parts is None else cls(*parts)

    def fuse(self) -> None:
        attn, mlp = self.attn, self.mlp
        self.qkv = _share_storage([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        biases = [attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]
        if all(b is not None for b in biases):
            self.qkv_bias = _share_storage(biases)
        elif any(b is not None for b in biases):  # some biased, some not: keep q, k, v apart
            self.qkv = None
        gate, up = mlp.gate_proj, mlp.up_proj
        if gate.bias is None and up.bias is None:
            self.gate_up = _share_storage([gate.weight, up.weight])


@torch.no_grad()
def _share_storage(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """One tensor of ``params`` concatenated along their first dimension; each parameter
    becomes a view of its rows."""
    whole = torch.cat([p.data for p in params])
    start = 0
    for p in params:
        rows = p.shape[0]
        p.data = whole[start : start + rows]
        start += rows
    return whole


class _Buffers:
    """Everything a captured step reads and writes, at fixed addresses."""

    def __init__(self, decoder: StaticDecoder, rows: int, positions: int) -> None:
        model = decoder.model
        device, dtype = decoder.device, decoder.dtype
        shape = (rows, decoder.kv_heads, positions, decoder.head_dim)
        self.rows, self.positions = rows, positions
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in decoder.layers]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in decoder.layers]
        self.valid = torch.zeros((rows, positions), device=device, dtype=torch.bool)
        vocab = model.get_output_embeddings().weight.shape[0]
        self.logits = torch.zeros((rows, vocab), device=device, dtype=torch.float32)
        self.noise = torch.ones((rows, vocab), device=device, dtype=torch.float32)
        self.position = torch.zeros(rows, device=device, dtype=torch.long)
        self.limit = torch.zeros(rows, device=device, dtype=torch.long)
        self.count = torch.zeros(rows, device=device, dtype=torch.long)
        self.done = torch.ones(rows, device=device, dtype=torch.bool)
        self.eos_hit = torch.zeros(rows, device=device, dtype=torch.bool)
        self.tokens = torch.zeros((rows, positions), device=device, dtype=torch.long)
        self.token_logprobs = torch.zeros((rows, positions), device=device, dtype=torch.float32)
        self.column = torch.zeros(1, device=device, dtype=torch.long)  # the KV column written
        self.step = torch.zeros(1, device=device, dtype=torch.long)  # the output column
        self.temperature = torch.ones(1, device=device, dtype=torch.float32)
        rotary = model.model.rotary_emb
        table = torch.arange(positions, device=device)[None]
        weight = model.model.embed_tokens.weight
        cos, sin = rotary(weight[:1], table)
        self.cos, self.sin = cos[0], sin[0]  # [positions, head_dim]

    def per_row(self) -> list[torch.Tensor]:
        """The tensors indexed by row first, moved together when rows are compacted."""
        return [
            *self.keys,
            *self.values,
            self.valid,
            self.logits,
            self.position,
            self.limit,
            self.count,
            self.done,
            self.eos_hit,
            self.tokens,
            self.token_logprobs,
        ]


class StaticDecoder:
    """Decoding over a static KV cache for one engine's model (see the module docstring)."""

    def __init__(self, model: Any, eos_token_ids: set[int], *, use_graphs: bool) -> None:
        self.model = model
        config = model.config
        self.layers: list[_Layer] = [
            _Layer.of(layer) for layer in model.model.layers[: config.num_hidden_layers]
        ]  # type: ignore[misc]
        for layer in self.layers:
            layer.fuse()
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = model.model.norm.variance_epsilon
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype
        self.eos = torch.tensor(sorted(eos_token_ids), device=self.device)
        self.use_graphs = use_graphs and self.device.type == "cuda"
        self.buffers: _Buffers | None = None
        self.graphs: dict[tuple[int, int, Sampling], torch.cuda.CUDAGraph] = {}
        self._pool: Any = None
        self.graph_captures = 0  # for the benchmark's report and the tests
        self.compactions = 0

    @classmethod
    def of(cls, model: Any, eos_token_ids: set[int], *, use_graphs: bool) -> StaticDecoder | None:
        """A decoder for ``model``, or None when it is not a plain Llama/Qwen2 stack with static
        RoPE and full attention."""
        config = model.config
        inner = getattr(model, "model", None)
        if getattr(config, "model_type", None) not in _PLAIN_MODELS or inner is None:
            return None
        if not all(hasattr(inner, p) for p in ("embed_tokens", "layers", "norm", "rotary_emb")):
            return None
        if getattr(inner.rotary_emb, "rope_type", None) not in _STATIC_ROPE:
            return None
        if getattr(inner.norm, "variance_epsilon", None) is None or not full_attention_cache(model):
            return None
        if any(_Layer.of(layer) is None for layer in inner.layers[: config.num_hidden_layers]):
            return None
        return cls(model, eos_token_ids, use_graphs=use_graphs)

    def release_memory(self) -> None:
        """Drop the KV buffers and the graphs (the next call allocates and captures again)."""
        self.buffers, self.graphs, self._pool = None, {}, None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ---- one call ----------------------------------------------------------------------

    @torch.inference_mode()
    def decode(
        self,
        prompts: list[list[int]],
        prompt_of_row: list[int],
        limits: list[int],
        sampling: Sampling,
        temperature: float,
        generator: torch.Generator,
        pad_token_id: int,
    ) -> list[RowResult]:
        """Decode one row per entry of ``prompt_of_row`` (an index into the distinct
        ``prompts``), each for at most its ``limits`` tokens."""
        rows = len(prompt_of_row)
        longest = max(len(p) for p in prompts)
        max_new = max(limits)
        bucket = rows_bucket(rows)
        self._ensure_buffers(bucket, _round_up(longest + max_new, LENGTH_STEP))
        buf = self.buffers
        assert buf is not None
        self._prefill(prompts, prompt_of_row, limits, bucket, pad_token_id)
        buf.temperature.fill_(temperature if temperature > 0 else 1.0)
        results: dict[int, RowResult] = {}
        row_ids = list(range(bucket))  # original row of each buffer row
        active = bucket
        for t in range(max_new):
            length = min(buf.positions, _round_up(longest + t + 1, LENGTH_STEP))
            if not sampling.greedy:
                buf.noise[:active].exponential_(generator=generator)
            self._run(active, length, sampling)
            if (t + 1) % CHECK_EVERY and t + 1 < max_new:
                continue
            left = int((~buf.done[:active]).sum())
            if left == 0:
                break
            if rows_bucket(left) < active:
                active = self._compact(active, left, row_ids, results)
        self._collect(range(active), row_ids, results)
        return [results[r] for r in range(rows)]

    def _ensure_buffers(self, rows: int, positions: int) -> None:
        buf = self.buffers
        if buf is not None and buf.rows >= rows and buf.positions >= positions:
            return
        if buf is not None:
            rows, positions = max(rows, buf.rows), max(positions, buf.positions)
        self.release_memory()
        self.buffers = _Buffers(self, rows, positions)

    def _prefill(
        self,
        prompts: list[list[int]],
        prompt_of_row: list[int],
        limits: list[int],
        bucket: int,
        pad_token_id: int,
    ) -> None:
        """Each distinct prompt once through the model (left-padded); its keys, values, mask,
        and last-position logits copied to its rows. Rows past ``len(prompt_of_row)`` up to the
        bucket are padding: a copy of row 0, done from the start."""
        buf = self.buffers
        assert buf is not None
        longest = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), longest), pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), longest), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, longest - len(prompt) :] = torch.tensor(prompt)
            mask[i, longest - len(prompt) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        source = prompt_of_row + [prompt_of_row[0]] * (bucket - len(prompt_of_row))
        index = torch.tensor(source, device=self.device)
        for layer, keys, values in zip(cache.layers, buf.keys, buf.values, strict=True):
            keys[:bucket, :, :longest] = layer.keys[index]
            values[:bucket, :, :longest] = layer.values[index]
        buf.valid[:bucket] = False
        buf.valid[:bucket, :longest] = mask[index].bool()
        buf.logits[:bucket] = out.logits[:, -1].float()[index]
        buf.position[:bucket] = mask.sum(-1)[index]
        padded = limits + [0] * (bucket - len(limits))
        buf.limit[:bucket] = torch.tensor(padded, device=self.device)
        buf.count[:bucket] = 0
        buf.done[:bucket] = buf.limit[:bucket] == 0
        buf.eos_hit[:bucket] = False
        buf.column.fill_(longest)
        buf.step.fill_(0)

    # ---- the step ----------------------------------------------------------------------

    def _run(self, rows: int, length: int, sampling: Sampling) -> None:
        if not self.use_graphs:
            self._step(rows, length, sampling)
            return
        key = (rows, length, sampling)
        graph = self.graphs.get(key)
        if graph is not None:
            graph.replay()
            return
        # this step runs eagerly (it also warms up the kernels), then is captured for the
        # next ones: capturing records the kernels without running them
        self._step(rows, length, sampling)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._pool):
            self._step(rows, length, sampling)
        self.graphs[key] = graph
        self.graph_captures += 1

    def _step(self, rows: int, length: int, sampling: Sampling) -> None:
        """Sample each row's next token from ``logits``, record it, then run it through the
        model into ``logits`` (attention over the first ``length`` KV columns)."""
        buf = self.buffers
        assert buf is not None
        logits = buf.logits[:rows]
        token, logprob = self._sample(logits, buf.noise[:rows], buf.temperature, sampling)
        going = ~buf.done[:rows]
        buf.tokens[:rows].index_copy_(1, buf.step, token[:, None])
        buf.token_logprobs[:rows].index_copy_(1, buf.step, logprob[:, None])
        buf.count[:rows] += going
        ended = buf.count[:rows] >= buf.limit[:rows]
        if not sampling.ignore_eos:
            eos = (token[:, None] == self.eos[None]).any(-1) & going
            buf.eos_hit[:rows] |= eos
            ended = ended | eos
        buf.done[:rows] |= ended
        buf.step += 1
        logits.copy_(self._forward(token, rows, length))
        buf.position[:rows] += 1
        buf.column += 1

    def _sample(
        self,
        logits: torch.Tensor,
        noise: torch.Tensor,
        temperature: torch.Tensor,
        sampling: Sampling,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if sampling.greedy:
            token = logits.argmax(-1)
            return token, token_logprobs(logits, token, 1.0)
        scaled = logits / temperature
        if sampling.filtered:
            filtered = filter_logits(scaled, sampling.top_k, sampling.top_p)
        else:
            filtered = scaled
        token = (filtered - noise.log()).argmax(-1)
        return token, token_logprobs(scaled, token, 1.0)

    def _forward(self, token: torch.Tensor, rows: int, length: int) -> torch.Tensor:
        """Logits [rows, vocab] fp32 after ``token`` [rows] at each row's position."""
        buf = self.buffers
        assert buf is not None
        inner = self.model.model
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        group = heads // kv_heads
        cos = buf.cos[buf.position[:rows]][:, None]  # [rows, 1, dim]: broadcast over heads
        sin = buf.sin[buf.position[:rows]][:, None]
        buf.valid[:rows].index_fill_(1, buf.column, True)
        mask = buf.valid[:rows, None, None, :length]
        x = F.embedding(token, inner.embed_tokens.weight)
        for layer, keys, values in zip(self.layers, buf.keys, buf.values, strict=True):
            attn, mlp = layer.attn, layer.mlp
            h = _norm(x, layer.input_norm)
            if layer.qkv is not None:
                qkv = F.linear(h, layer.qkv, layer.qkv_bias)
                q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], -1)
            else:
                q, k, v = attn.q_proj(h), attn.k_proj(h), attn.v_proj(h)
            q = apply_rope(q.reshape(rows, heads, dim), cos, sin)
            k = apply_rope(k.reshape(rows, kv_heads, dim), cos, sin)
            v = v.reshape(rows, kv_heads, 1, dim)
            layer_keys, layer_values = keys[:rows], values[:rows]
            layer_keys.index_copy_(2, buf.column, k[:, :, None])
            layer_values.index_copy_(2, buf.column, v)
            # a KV head's query heads as the query "positions": one read of its keys for all
            out = F.scaled_dot_product_attention(
                q.view(rows, kv_heads, group, dim),
                layer_keys[:, :, :length],
                layer_values[:, :, :length],
                attn_mask=mask,
                scale=attn.scaling,
            )
            x = x + attn.o_proj(out.reshape(rows, heads * dim))
            h = _norm(x, layer.post_norm)
            if layer.gate_up is not None:
                gate, up = F.linear(h, layer.gate_up).chunk(2, -1)
            else:
                gate, up = mlp.gate_proj(h), mlp.up_proj(h)
            x = x + mlp.down_proj(mlp.act_fn(gate) * up)
        x = F.rms_norm(x, x.shape[-1:], inner.norm.weight, self.eps)
        return self.model.lm_head(x).float()

    # ---- rows ----------------------------------------------------------------------------

    def _compact(
        self, active: int, left: int, row_ids: list[int], results: dict[int, RowResult]
    ) -> int:
        """Move the rows still going to the front of the buffers; the finished ones' results
        are read out first. Returns the new number of active rows (a bucket)."""
        buf = self.buffers
        assert buf is not None
        going = (~buf.done[:active]).nonzero().flatten().tolist()
        still = set(going)
        finished = [b for b in range(active) if b not in still]
        self._collect(finished, row_ids, results)
        smaller = rows_bucket(left)
        keep = going + finished[: smaller - len(going)]  # fill the bucket with finished rows
        index = torch.tensor(keep, device=self.device)
        for tensor in buf.per_row():
            tensor[:smaller] = tensor[index]
        row_ids[:smaller] = [row_ids[b] for b in keep]
        self.compactions += 1
        return smaller

    def _collect(self, rows: Any, row_ids: list[int], results: dict[int, RowResult]) -> None:
        """Read the finished results of buffer ``rows`` (first result of an original row wins:
        a finished row kept as filler after a compaction is read again, unchanged)."""
        buf = self.buffers
        assert buf is not None
        rows = list(rows)
        if not rows:
            return
        index = torch.tensor(rows, device=self.device)
        counts = buf.count[index].tolist()
        eos = buf.eos_hit[index].tolist()
        tokens = buf.tokens[index].tolist()
        logprobs = buf.token_logprobs[index].tolist()
        for i, b in enumerate(rows):
            original = row_ids[b]
            if original in results:
                continue
            n = counts[i]
            results[original] = RowResult(
                tokens[i][:n], logprobs[i][:n], "stop" if eos[i] else "length"
            )


def _norm(x: torch.Tensor, norm: Any) -> torch.Tensor:
    return F.rms_norm(x, x.shape[-1:], norm.weight, norm.variance_epsilon)
