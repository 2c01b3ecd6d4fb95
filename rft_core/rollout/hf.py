"""The ``hf`` rollout engine: batched sampling with plain transformers, on CPU or one GPU.

Each distinct prompt is prefilled once (left-padded with the others); its KV cache and
last-position logits are then expanded to its ``n`` samples, and all prompts × ``n`` rows decode
as one batch. Decoding is our own short loop over ``model(..., past_key_values=cache,
use_cache=True)`` (``DecodeStep`` for the plain decoder stacks) rather than ``model.generate``,
because we need the log-prob of every sampled token under an exact convention, a private RNG (a
seeded call never touches the global torch RNG), and rows that stop early are dropped from the
batch (and the KV cache, a few at a time) instead of being decoded until the longest row ends.

LOG-PROB CONVENTION (the trainer uses the same, so the on-policy ratio is 1 up to numerics):
the log-prob of a sampled token is ``log_softmax(logits / temperature)[token]``, computed in
fp32 BEFORE top-k/top-p filtering, as verl's actor recomputes it. With ``temperature == 0``
(greedy) the log-prob is taken at temperature 1. The EOS token that ends a response is part of
``response_ids`` (and has a log-prob), so the policy learns when to stop; ``text`` omits it.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from rft_core.errors import DataError, RFTError
from rft_core.rollout.base import Generation, SamplingParams
from rft_core.rollout.decode_step import DecodeStep

log = logging.getLogger(__name__)

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}


def resolve_device(device: str | None) -> torch.device:
    """``None``/"auto" → the first CUDA device when there is one, else the CPU."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """ "auto" → bf16 on CUDA, fp32 on CPU (bf16 matmuls are slow on most CPUs)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    try:
        return _DTYPES[str(dtype).lower()]
    except KeyError:
        raise RFTError(
            f"dtype {dtype!r} is not supported; use one of auto, {', '.join(sorted(_DTYPES))}"
        ) from None


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """Log-prob of ``tokens`` under ``softmax(logits / temperature)`` in fp32 (see module doc).

    ``logits``: (..., vocab); ``tokens``: (...). Shared by the engine and the trainer so that both
    sides of the importance ratio use one formula.
    """
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) tokens outside the top-k and outside the top-p nucleus; keeps ≥ 1 token."""
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if 0.0 < top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass before it already reaches top_p (the first always stays)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@dataclass
class _Row:
    """Book-keeping for one (prompt, sample) row of the decoding batch."""

    prompt_index: int
    prompt_ids: list[int]
    tokens: list[int]
    logprobs: list[float]
    limit: int = 0  # response tokens this row may sample
    finish_reason: str = "length"


def full_attention_cache(model: Any) -> bool:
    """Whether ``model`` keeps a plain full-attention KV cache (no sliding-window, recurrent or
    other layer kinds), so that a prompt's cache can be shared by several rows exactly."""
    if getattr(model, "_is_stateful", False):
        return False
    layers = DynamicCache(config=model.config).layers
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


class SharedPrefixLayer(DynamicLayer):
    """A full-attention KV cache layer for sampling several responses per prompt: each distinct
    prompt's keys/values once ([U, H, P, D], from the prefill), and the tokens decoded after it
    per row in a buffer sized for the whole decode ([B, H, max_new, D], written in place where
    ``DynamicLayer`` would concatenate a copy of the whole cache at every token). Decoding
    attends through ``shared_prefix_attention``, which reads each prompt's keys once per step
    instead of once per sample."""

    def __init__(self, max_new: int) -> None:
        super().__init__()
        self.max_new = max_new
        self.length = 0  # decoded positions held per row
        self.prefix_keys: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.prefix_keys is None:  # the prefill: attention runs as usual
            self.prefix_keys, self.prefix_values = key_states, value_states
            return key_states, value_states
        if self.length == 0:
            shape = (key_states.shape[0], key_states.shape[1], self.max_new)
            self.key_buffer = key_states.new_empty((*shape, key_states.shape[-1]))
            self.value_buffer = value_states.new_empty((*shape, value_states.shape[-1]))
        end = self.length + key_states.shape[-2]
        if end > self.max_new:
            raise RuntimeError(f"KV cache room for {self.max_new} decoded tokens exceeded")
        self.key_buffer[:, :, self.length : end] = key_states
        self.value_buffer[:, :, self.length : end] = value_states
        self.length = end
        self.keys = self.key_buffer[:, :, :end]
        self.values = self.value_buffer[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        prefix = 0 if self.prefix_keys is None else self.prefix_keys.shape[-2]
        return prefix + self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.length:
            self.key_buffer = self.key_buffer[indices]
            self.value_buffer = self.value_buffer[indices]
            self.keys = self.key_buffer[:, :, : self.length]
            self.values = self.value_buffer[:, :, : self.length]

    def _unsupported(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("the hf engine's KV cache only grows and drops rows")

    crop = reset = reorder_cache = batch_repeat_interleave = _unsupported


@dataclass
class _PrefixRows:
    """Which prompt each decoding row extends, as runs of consecutive rows (rows are laid out
    prompt by prompt and dropping finished rows keeps their order)."""

    cache: Any  # the DynamicCache of SharedPrefixLayers
    prefix_mask: torch.Tensor  # [U, P] bool: the prompts' padding
    prefix_of_row: list[int]
    run_prefix: torch.Tensor | None  # [runs] long: the prompt of each run; None: run u is prompt u
    masked_out: torch.Tensor  # [runs, 1, 1, P] bool: padding of each run's prompt
    run_of_row: torch.Tensor  # [B] long
    slot_of_row: torch.Tensor  # [B] long: the row's place within its run
    longest_run: int
    grid: bool  # every run holds ``longest_run`` rows: rows → runs is a reshape

    @classmethod
    def of(cls, cache: Any, prefix_mask: torch.Tensor, prefix_of_row: list[int]) -> _PrefixRows:
        runs: list[int] = []
        run_of_row, slot_of_row, slot = [], [], 0
        for i, prefix in enumerate(prefix_of_row):
            if i == 0 or prefix != prefix_of_row[i - 1]:
                runs.append(prefix)
                slot = 0
            run_of_row.append(len(runs) - 1)
            slot_of_row.append(slot)
            slot += 1
        device = prefix_mask.device
        run_prefix = None if runs == list(range(len(prefix_mask))) else torch.tensor(runs)
        if run_prefix is not None:
            run_prefix = run_prefix.to(device)
        longest = max(slot_of_row) + 1
        return cls(
            cache,
            prefix_mask,
            list(prefix_of_row),
            run_prefix,
            ~(prefix_mask if run_prefix is None else prefix_mask[run_prefix])[:, None, None, :],
            torch.tensor(run_of_row, device=device),
            torch.tensor(slot_of_row, device=device),
            longest,
            len(runs) * longest == len(prefix_of_row),
        )

    def keep(self, rows: list[int]) -> _PrefixRows:
        """The layout after dropping every row not in ``rows``."""
        return _PrefixRows.of(self.cache, self.prefix_mask, [self.prefix_of_row[b] for b in rows])

    def to_runs(self, x: torch.Tensor) -> torch.Tensor:
        """[B, Hkv, group, X] per row → [runs, Hkv, slots * group, X], a run's rows side by side
        (zeros in the slots of a shorter run)."""
        batch, heads, group, width = x.shape
        runs = len(self.masked_out)
        if self.grid:
            by_run = x.view(runs, self.longest_run, heads, group, width)
        else:
            by_run = x.new_zeros((runs, self.longest_run, heads, group, width))
            by_run[self.run_of_row, self.slot_of_row] = x
        return by_run.permute(0, 2, 1, 3, 4).reshape(runs, heads, -1, width)

    def to_rows(self, x: torch.Tensor, group: int) -> torch.Tensor:
        """The inverse of ``to_runs``: [runs, Hkv, slots * group, X] → [B, Hkv, group, X]."""
        runs, heads, _, width = x.shape
        by_run = x.view(runs, heads, self.longest_run, group, width).permute(0, 2, 1, 3, 4)
        if self.grid:
            return by_run.reshape(-1, heads, group, width)
        return by_run[self.run_of_row, self.slot_of_row]


_STALE_ROWS = 8  # finished rows stay in the decoding batch while fewer than 1/8 of it


_DECODING: contextvars.ContextVar[_PrefixRows] = contextvars.ContextVar("hf_engine_decoding")
SHARED_PREFIX_ATTENTION = "rft_shared_prefix"


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """One decoding step's attention (query [B, Hq, 1, D]) over each row's prompt, read once per
    run of rows that share it, and the row's own decoded tokens (``key``/``value``); one softmax
    over both, as plain attention over the concatenation."""
    rows = _DECODING.get()
    layer = rows.cache.layers[module.layer_idx]
    batch, q_heads, _, dim = query.shape
    kv_heads = key.shape[1]
    group = q_heads // kv_heads
    q = query.reshape(batch, kv_heads, group, dim) * (scaling or dim**-0.5)
    prefix_keys, prefix_values = layer.prefix_keys, layer.prefix_values  # [U, Hkv, P, D]
    if rows.run_prefix is not None:
        prefix_keys, prefix_values = prefix_keys[rows.run_prefix], prefix_values[rows.run_prefix]
    prefix_scores = torch.matmul(rows.to_runs(q), prefix_keys.transpose(-1, -2))
    prefix_scores = rows.to_rows(prefix_scores.masked_fill(rows.masked_out, float("-inf")), group)
    own_scores = torch.matmul(q, key.transpose(-1, -2))  # [B, Hkv, group, t]
    prefix_len = prefix_scores.shape[-1]
    probs = torch.softmax(torch.cat([prefix_scores, own_scores], -1), dim=-1)
    from_prefix = torch.matmul(rows.to_runs(probs[..., :prefix_len]), prefix_values)
    out = torch.matmul(probs[..., prefix_len:], value) + rows.to_rows(from_prefix, group)
    return out.reshape(batch, 1, q_heads, dim), None


AttentionInterface.register(SHARED_PREFIX_ATTENTION, shared_prefix_attention)
# decoding needs no mask: prompt padding is masked above, and one query sees all its own tokens
AttentionMaskInterface.register(SHARED_PREFIX_ATTENTION, lambda *args, **kwargs: None)

GROUPED_SDPA_ATTENTION = "rft_grouped_sdpa"


def grouped_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, except that a masked call with grouped-query heads
    hands the key/value heads to torch's kernel as they are (``enable_gqa``) where transformers
    copies each of them once per query head of its group (it does so on CPU and CUDA alike,
    since CUDA's fast kernels take no mask with ``enable_gqa``; on CPU it is the same kernel,
    without the copies in the forward and their sum in the backward)."""
    groups = getattr(module, "num_key_value_groups", 1)
    plain = attention_mask is None or attention_mask.dtype != torch.bool
    if groups == 1 or plain or any(kwargs.get(k) is not None for k in ("position_bias", "softcap")):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        enable_gqa=True,
    )
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(GROUPED_SDPA_ATTENTION, grouped_sdpa_attention)
AttentionMaskInterface.register(GROUPED_SDPA_ATTENTION, sdpa_mask)


@contextlib.contextmanager
def cpu_attention(model: Any) -> Iterator[None]:
    """While in the block, a CPU model on transformers' ``sdpa`` attention runs
    ``grouped_sdpa_attention`` instead (same results); any other model is left as it is, and
    so is one under activation checkpointing (its backward recomputes outside the block)."""
    config = model.config
    before = config._attn_implementation
    checkpointed = getattr(model, "is_activation_checkpointing", False)
    if before != "sdpa" or model.device.type != "cpu" or checkpointed:
        yield
        return
    config._attn_implementation = GROUPED_SDPA_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = before


class PromptEncoding:
    """Prompt strings and chat conversations → token ids → ``generate_ids``; shared by engines.
    Needs ``tokenizer``, ``chat_template_kwargs`` and ``generate_ids`` on the engine."""

    tokenizer: Any
    chat_template_kwargs: dict[str, Any]
    max_prompt_tokens: int | None = None

    def fit_prompts(self, prompt_ids: list[list[int]]) -> list[list[int]]:
        """Prompts longer than ``max_prompt_tokens`` keep their last ``max_prompt_tokens``
        tokens (the end holds the question and the generation prompt), as vLLM's
        ``truncate_prompt_tokens`` does, with a warning."""
        limit = self.max_prompt_tokens
        if not limit or all(len(p) <= limit for p in prompt_ids):
            return prompt_ids
        longer = [len(p) for p in prompt_ids if len(p) > limit]
        log.warning(
            "%d prompt(s) of up to %d tokens truncated to model.max_prompt_tokens=%d (kept the end)",
            len(longer),
            max(longer),
            limit,
        )
        return [p[-limit:] if len(p) > limit else p for p in prompt_ids]

    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        raise NotImplementedError

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        """Sample ``params.n`` responses for each already-rendered prompt string."""
        ids = [self.tokenizer(p)["input_ids"] for p in prompts]
        return self.generate_ids(ids, params)

    def chat(
        self, conversations: list[list[dict]], params: SamplingParams
    ) -> list[list[Generation]]:
        """Render each conversation with the chat template (generation prompt on) and sample."""
        return self.generate_ids([self.encode_chat(c) for c in conversations], params)

    def encode_chat(self, conversation: list[dict]) -> list[int]:
        """Token ids of a conversation rendered with the chat template, generation prompt on."""
        text = self.tokenizer.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
        )
        # the template already holds any BOS it wants: no second one from the tokenizer
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


class HFRolloutEngine(PromptEncoding):
    """Rollout engine on transformers. See the module docstring for the log-prob convention."""

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        device: str | None = None,
        seed: int = 0,
        max_model_len: int | None = None,
        max_prompt_tokens: int | None = None,
        chat_template: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        num_threads: int | None = None,
        attn_implementation: str | None = "sdpa",
        model: Any = None,
        tokenizer: Any = None,
        **unused: Any,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if unused:
            log.debug("hf engine ignores options meant for other engines: %s", sorted(unused))
        if num_threads:
            torch.set_num_threads(num_threads)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.seed = seed
        self._calls = 0
        self.model_version = 0
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.tokenizer = tokenizer
        if chat_template:
            self.tokenizer.chat_template = chat_template
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        if model is None:
            kwargs: dict[str, Any] = {"dtype": self.dtype}
            if attn_implementation:
                kwargs["attn_implementation"] = attn_implementation
            model = AutoModelForCausalLM.from_pretrained(model_path, **kwargs)
        self.model = model.to(device=self.device, dtype=self.dtype).eval()
        self.max_model_len = max_model_len or getattr(
            self.model.config, "max_position_embeddings", None
        )
        self.max_prompt_tokens = max_prompt_tokens
        self.eos_token_ids = self._eos_ids()
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else sorted(self.eos_token_ids)[0]

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        gen_cfg = getattr(self.model, "generation_config", None)
        for source in (getattr(gen_cfg, "eos_token_id", None), self.tokenizer.eos_token_id):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(int(i) for i in source)
        if not ids:
            raise RFTError(
                "the model has no eos_token_id (neither generation_config.json nor the "
                "tokenizer sets one); set eos_token in tokenizer_config.json"
            )
        return ids

    # ---- public API (generate/chat/encode_chat come from PromptEncoding) -----------------

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Copy new weights in place (names as in the HF model's ``state_dict``)."""
        own = self.model.state_dict()
        unknown = [k for k in state_dict if k not in own]
        if unknown:
            raise RFTError(
                f"weights do not match the rollout model: {len(unknown)} unknown names "
                f"(first: {unknown[:3]}); the trainer and explorer must load the same model_path"
            )
        with torch.no_grad():
            for name, tensor in state_dict.items():
                own[name].copy_(tensor)
        self.model_version = int(version)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.model.state_dict()

    @torch.inference_mode()
    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        """Sample ``params.n`` responses for each tokenized prompt (one batch for all)."""
        if not prompt_ids:
            return []
        prompt_ids = self.fit_prompts(prompt_ids)
        rows = [
            _Row(i, list(p), [], [], limit=self._max_new_tokens(p, params.max_tokens))
            for i, p in enumerate(prompt_ids)
            for _ in range(params.n)
        ]
        max_new = max(row.limit for row in rows)
        if max_new > 0:
            self._decode(rows, params, max_new)
        out: list[list[Generation]] = [[] for _ in prompt_ids]
        texts = self.tokenizer.batch_decode([r.tokens for r in rows], skip_special_tokens=True)
        for row, text in zip(rows, texts, strict=True):
            out[row.prompt_index].append(
                Generation(
                    prompt_ids=row.prompt_ids,
                    response_ids=row.tokens,
                    logprobs=row.logprobs,
                    text=text,
                    finish_reason=row.finish_reason,
                    extra={"model_version": self.model_version},
                )
            )
        return out

    # ---- decoding ---------------------------------------------------------------------

    def _max_new_tokens(self, prompt: list[int], max_tokens: int) -> int:
        """A row's response budget: ``max_tokens``, less where the prompt leaves less room in
        ``max_model_len`` (each row its own, not the batch's longest prompt's)."""
        if not prompt:
            raise DataError("an empty prompt was given to the rollout engine")
        if self.max_model_len is None:
            return max_tokens
        room = self.max_model_len - len(prompt)
        if room <= 0:
            raise DataError(
                f"a prompt of {len(prompt)} tokens does not fit model.max_model_len="
                f"{self.max_model_len}; raise max_model_len or lower model.max_prompt_tokens"
            )
        return min(max_tokens, room)

    def _generator(self, seed: int | None) -> torch.Generator:
        gen = torch.Generator(device=self.device)
        # without an explicit seed, successive calls differ but a whole run stays reproducible
        gen.manual_seed(seed if seed is not None else self.seed * 1_000_003 + self._calls)
        self._calls += 1
        return gen

    def _decode(self, rows: list[_Row], params: SamplingParams, max_new: int) -> None:
        gen = self._generator(params.seed)
        greedy = params.temperature <= 0
        logits, cache, attention, positions, shared = self._prefill(rows, max_new)
        eos = torch.tensor(sorted(self.eos_token_ids), device=self.device)
        config = self.model.config
        attention_implementation = config._attn_implementation
        step_fn = None
        if shared is not None:
            config._attn_implementation = SHARED_PREFIX_ATTENTION
            decoding = _DECODING.set(shared)
            step_fn = DecodeStep.of(
                self.model, int(positions.max()) + max_new + 1, shared_prefix_attention
            )
        try:
            # batch row → index into ``rows``; None: a finished row still in the batch, unread
            alive: list[int | None] = list(range(len(rows)))
            for step in range(max_new):
                if greedy:
                    tokens = logits.argmax(-1)
                    logps = token_logprobs(logits, tokens, 1.0)
                else:
                    scaled = logits / params.temperature
                    filtered = filter_logits(scaled, params.top_k, params.top_p)
                    probs = torch.softmax(filtered, dim=-1)
                    tokens = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
                    logps = token_logprobs(scaled, tokens, 1.0)
                finished = torch.isin(tokens, eos)
                tok_list, lp_list, fin_list = tokens.tolist(), logps.tolist(), finished.tolist()
                for b, row_index in enumerate(alive):
                    if row_index is None:
                        continue
                    row = rows[row_index]
                    row.tokens.append(tok_list[b])
                    row.logprobs.append(lp_list[b])
                    if fin_list[b]:
                        row.finish_reason = "stop"
                        alive[b] = None
                    elif len(row.tokens) >= row.limit:
                        alive[b] = None  # its own budget is spent: "length"
                if step == max_new - 1:
                    break
                keep = [b for b, row_index in enumerate(alive) if row_index is not None]
                if not keep:
                    break
                input_ids = tokens.unsqueeze(-1)
                positions = positions[:, -1:] + 1
                if self.max_model_len is not None:
                    # a finished row decodes on, unread, until it leaves the batch: keep its
                    # position inside the model's (learned position tables end there)
                    positions = positions.clamp(max=self.max_model_len - 1)
                attention = torch.cat([attention, attention.new_ones((len(alive), 1))], dim=-1)
                # finished rows leave the batch (and the KV cache) once there are enough of them
                # to pay for the copy of the cache (and, in a shared layout, for the layout no
                # longer being a plain reshape); until then they decode on, unread
                if len(alive) - len(keep) >= max(1, len(alive) // _STALE_ROWS):
                    index = torch.tensor(keep, device=self.device)
                    cache.batch_select_indices(index)
                    input_ids, positions, attention = (
                        input_ids[index],
                        positions[index],
                        attention[index],
                    )
                    alive = [alive[b] for b in keep]
                    if shared is not None:
                        shared = shared.keep(keep)
                        _DECODING.set(shared)
                if step_fn is not None:
                    logits = step_fn(input_ids, positions, cache)
                else:
                    logits, cache = self._forward(input_ids, attention, positions, cache)
        finally:
            if shared is not None:
                config._attn_implementation = attention_implementation
                _DECODING.reset(decoding)

    def _prefill(
        self, rows: list[_Row], max_new: int
    ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor, _PrefixRows | None]:
        """Run each distinct prompt once (left-padded) and expand the last-position logits to
        every row that samples from it. A full-attention model keeps the prompts' keys once
        (``SharedPrefixLayer``) and decodes with ``shared_prefix_attention``; any other gets its
        own cache expanded to the rows. Returns (logits [B, V] fp32, cache, attention mask
        [B, S], position ids [B, S], the rows' prompts when shared)."""
        distinct: dict[tuple[int, ...], int] = {}
        prompt_of_row = [distinct.setdefault(tuple(r.prompt_ids), len(distinct)) for r in rows]
        longest = max(len(p) for p in distinct)
        input_ids = torch.full((len(distinct), longest), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(distinct), longest), dtype=torch.long)
        for i, prompt in enumerate(distinct):
            input_ids[i, longest - len(prompt) :] = torch.tensor(prompt)
            attention[i, longest - len(prompt) :] = 1
        input_ids = input_ids.to(self.device)
        attention = attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        cache, shared = None, None  # other models bring their own cache
        if full_attention_cache(self.model):
            cache = DynamicCache(config=self.model.config)
            cache.layers = [SharedPrefixLayer(max_new) for _ in cache.layers]
            shared = _PrefixRows.of(cache, attention.bool(), prompt_of_row)
        with cpu_attention(self.model):
            logits, cache = self._forward(input_ids, attention, positions, cache)
        if prompt_of_row != list(range(len(distinct))):
            index = torch.tensor(prompt_of_row, device=self.device)
            if shared is None:
                cache.batch_select_indices(index)
            logits, attention, positions = logits[index], attention[index], positions[index]
        return logits, cache, attention, positions, shared

    def _forward(
        self, input_ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        """One forward on the cache: (last-position logits [B, V] fp32, the cache)."""
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1, :].float(), out.past_key_values
