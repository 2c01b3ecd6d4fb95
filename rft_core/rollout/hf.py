"""The ``hf`` rollout engine: batched sampling with plain transformers, on CPU or one GPU.

Each distinct prompt is prefilled once (left-padded with the others); its KV cache and
last-position logits are then expanded to its ``n`` samples, and all prompts × ``n`` rows decode
as one batch. Decoding is our own short loop over ``model(..., past_key_values=cache,
use_cache=True)`` (``DecodeStep`` for the plain decoder stacks) rather than ``model.generate``,
because we need the log-prob of every sampled token under an exact convention, a private RNG (a
seeded call never touches the global torch RNG), and rows that stop early are dropped from the
batch (and the KV cache, a few at a time) instead of being decoded until the longest row ends.

Several samples of one prompt decode over one copy of its KV cache where the model allows it
(``rft_core.rollout.shared_prefix``).

LOG-PROB CONVENTION (``rft_core.modeling.token_logprobs``, which the trainer uses too, so the
on-policy ratio is 1 up to numerics): the log-prob of a sampled token is
``log_softmax(logits / temperature)[token]``, computed in fp32 BEFORE top-k/top-p filtering.
With ``temperature == 0`` (greedy) the log-prob is taken at temperature 1. The EOS token that
ends a response is part of ``response_ids`` (and has a log-prob), so the policy learns when to
stop; ``text`` omits it.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.cache_utils import DynamicCache

from rft_core.errors import DataError, RFTError
from rft_core.modeling import (
    cpu_attention,
    full_attention_cache,
    resolve_device,
    resolve_dtype,
    token_logprobs,
)
from rft_core.rollout.base import Generation, PromptEncoding, SamplingParams
from rft_core.rollout.decode_step import DecodeStep
from rft_core.rollout.sampling import filter_logits
from rft_core.rollout.shared_prefix import (
    PrefixRows,
    SharedPrefixLayer,
    set_decoding_rows,
    shared_prefix_attention,
    shared_prefix_decoding,
)
from rft_core.rollout.static_decode import Sampling, StaticDecoder

__all__ = ["HFRolloutEngine", "filter_logits"]

log = logging.getLogger(__name__)


@dataclass
class _Row:
    """Book-keeping for one (prompt, sample) row of the decoding batch."""

    prompt_index: int
    prompt_ids: list[int]
    tokens: list[int]
    logprobs: list[float]
    limit: int = 0  # response tokens this row may sample
    finish_reason: str = "length"


_STALE_ROWS = 8  # finished rows stay in the decoding batch while fewer than 1/8 of it


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
        static_cache: bool | None = None,
        enforce_eager: bool = False,
        model: Any = None,
        tokenizer: Any = None,
        **unused: Any,
    ) -> None:
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
        # static KV cache + captured decoding step (rft_core.rollout.static_decode): on CUDA by
        # default, CUDA graphs unless enforce_eager; None for a model it does not cover
        if static_cache is None:
            static_cache = self.device.type == "cuda"
        self.static_decoder = (
            StaticDecoder.of(self.model, self.eos_token_ids, use_graphs=not enforce_eager)
            if static_cache
            else None
        )

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

    def release_memory(self) -> None:
        """Free the static decoding path's KV buffers and graphs (colocate calls this while the
        trainer steps); the next call allocates them again."""
        if self.static_decoder is not None:
            self.static_decoder.release_memory()

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
        if max_new > 0 and self.static_decoder is not None:
            self._decode_static(rows, params)
        elif max_new > 0:
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

    def _decode_static(self, rows: list[_Row], params: SamplingParams) -> None:
        """Decode through ``StaticDecoder`` (same tokens as ``_decode`` under greedy decoding)."""
        assert self.static_decoder is not None
        distinct: dict[tuple[int, ...], int] = {}
        prompt_of_row = [distinct.setdefault(tuple(r.prompt_ids), len(distinct)) for r in rows]
        sampling = Sampling(
            greedy=params.temperature <= 0,
            top_k=params.top_k,
            top_p=params.top_p,
            ignore_eos=params.ignore_eos,
        )
        results = self.static_decoder.decode(
            [list(p) for p in distinct],
            prompt_of_row,
            [row.limit for row in rows],
            sampling,
            params.temperature,
            self._generator(params.seed),
            self.pad_token_id,
        )
        for row, result in zip(rows, results, strict=True):
            row.tokens, row.logprobs = result.tokens, result.logprobs
            row.finish_reason = result.finish_reason

    def _decode(self, rows: list[_Row], params: SamplingParams, max_new: int) -> None:
        gen = self._generator(params.seed)
        greedy = params.temperature <= 0
        logits, cache, attention, positions, shared = self._prefill(rows, max_new)
        eos = torch.tensor(sorted(self.eos_token_ids), device=self.device)
        step_fn = None
        with contextlib.ExitStack() as decoding:
            if shared is not None:
                decoding.enter_context(shared_prefix_decoding(self.model, shared))
                step_fn = DecodeStep.of(
                    self.model, int(positions.max()) + max_new + 1, shared_prefix_attention
                )
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
                finished = torch.isin(tokens, eos) & (not params.ignore_eos)
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
                        set_decoding_rows(shared)
                if step_fn is not None:
                    logits = step_fn(input_ids, positions, cache)
                else:
                    logits, cache = self._forward(input_ids, attention, positions, cache)

    def _prefill(
        self, rows: list[_Row], max_new: int
    ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor, PrefixRows | None]:
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
            shared = PrefixRows.of(cache, attention.bool(), prompt_of_row)
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
