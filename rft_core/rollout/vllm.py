"""The ``vllm`` rollout engine for GPU nodes, written against vLLM's public offline API.

Targets vLLM 0.10.2 – 0.11.x (V1 engine only), the versions Trinity-RFT 0.6 runs on. The API
used, and reproduced by the fake package in ``tests/core/fake_vllm`` that the tests run this
module against (vLLM cannot be installed on the CPU machines this project is tested on):

- ``vllm.LLM(model, *, tensor_parallel_size, dtype, seed, gpu_memory_utilization,
  enforce_eager, **engine_args)`` with the ``EngineArgs`` fields ``max_model_len``,
  ``enable_prefix_caching``, ``enable_chunked_prefill``, ``logprobs_mode`` (0.10+) and
  ``worker_extension_cls``; an unknown keyword is a ``TypeError`` in vLLM;
- ``vllm.SamplingParams(n, temperature, top_p, top_k, max_tokens, logprobs, seed)``:
  ``top_k=0`` disables top-k (0.10+; ``-1`` is only kept for backward compatibility),
  ``logprobs=0`` returns the log-prob of the sampled token only;
- ``LLM.generate(prompts, sampling_params, *, use_tqdm)`` with ``vllm.inputs.TokensPrompt``
  (the legacy ``prompt_token_ids=`` keyword is deprecated, and gone in recent versions);
- ``RequestOutput.outputs[i]`` = ``CompletionOutput(index, text, token_ids,
  cumulative_logprob, logprobs, finish_reason, stop_reason)``; ``logprobs`` is one dict per
  generated token, ``{token_id: Logprob(logprob, rank, decoded_token)}``, holding the sampled
  token; ``finish_reason`` is "stop" (EOS / stop token, which stays in ``token_ids``),
  "length" (``max_tokens`` or ``max_model_len``) or "abort";
- ``LLM.collective_rpc(method, timeout=None, args=(), kwargs=None)`` runs a method of the
  ``worker_extension_cls`` mixin on every worker (one per tensor-parallel rank);
  ``LLM.reset_prefix_cache()``; ``LLM.get_tokenizer()``.

Prompts: chat conversations are rendered here with the tokenizer's chat template (the same
``PromptEncoding`` as the hf engine, ``custom_chat_template`` and ``chat_template_kwargs``
applied), then sent as token ids, so the prompt ids the trainer sees are exactly the ones vLLM
sampled from. ``LLM.chat`` would render inside vLLM and hide them.

Log-probs: ``logprobs_mode="processed_logprobs"`` gives them after temperature and
top-k/top-p. With the defaults (top_p = 1, top_k off) that is exactly the hf engine's
convention (``log_softmax(logits / temperature)``, ``rft_core.modeling.token_logprobs``); with
top-k/top-p filtering vLLM renormalises over the kept tokens, so the trainer's first ratio is not
exactly 1.

Weights: the synchronizer calls ``load_weights(state_dict, version)``; the tensors go (on CPU:
vLLM serialises RPC arguments to its worker processes) to every worker through
``collective_rpc`` into ``WorkerExtension.rft_load_weights``, which hands them to the model's own
``load_weights`` (it knows the Hugging Face names, fuses qkv / gate_up and shards for TP) - the
path vLLM's RLHF examples, OpenRLHF's ``WorkerWrap`` and Trinity-RFT's worker take. The prefix
cache is reset afterwards: its KV blocks were computed with the old weights.
"""

from __future__ import annotations

from typing import Any

import torch

from rft_core import dtypes
from rft_core.errors import DataError, RFTError
from rft_core.rollout.base import Generation, PromptEncoding, SamplingParams

WORKER_EXTENSION = "rft_core.rollout.vllm.WorkerExtension"
LOGPROBS_MODE = "processed_logprobs"
HF_ONLY_OPTIONS = ("device", "num_threads", "attn_implementation", "model", "tokenizer")


class WorkerExtension:
    """Mixed into vLLM's GPU worker (``worker_extension_cls``); runs inside each worker."""

    def rft_load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        model = self.model_runner.model  # type: ignore[attr-defined]
        device = next(model.parameters()).device
        loaded = model.load_weights(weights=((n, t.to(device)) for n, t in named_tensors))
        return len(loaded) if loaded is not None else len(named_tensors)


def vllm_dtype(dtype: str) -> str:
    """Our dtype name as vLLM's: "auto" is bfloat16 as on the trainer (vLLM's own "auto" turns
    an fp32 checkpoint into fp16), an alias its canonical name (``rft_core.dtypes``); any other
    value goes to vLLM as it is, whose error lists the dtypes it takes."""
    if dtype == dtypes.AUTO:
        return "bfloat16"
    try:
        return dtypes.canonical(dtype)
    except RFTError:
        return dtype


def sampling_kwargs(params: SamplingParams, seed: int) -> dict[str, Any]:
    """Our ``SamplingParams`` as ``vllm.SamplingParams`` keyword arguments."""
    return {
        "n": params.n,
        "temperature": max(params.temperature, 0.0),  # 0 = greedy in vLLM too
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else 0,  # 0 = off
        "max_tokens": params.max_tokens,
        "logprobs": 0,  # only the sampled token's log-prob
        "seed": seed,
        "ignore_eos": params.ignore_eos,
    }


def finish_reason(reason: str | None) -> str:
    """vLLM's ``CompletionOutput.finish_reason`` as ours ("stop" | "length"). An aborted request
    is an engine failure, never a sample to train on."""
    if reason in ("stop", "length"):
        return reason
    raise RuntimeError(f"vLLM finished a request with finish_reason={reason!r}")


def completion_to_generation(
    prompt_ids: list[int], completion: Any, model_version: int
) -> Generation:
    """One ``CompletionOutput`` as a ``Generation`` (log-prob of each sampled token)."""
    tokens = list(completion.token_ids)
    if completion.logprobs is None or len(completion.logprobs) != len(tokens):
        raise RuntimeError(
            "vLLM returned no per-token log-probs for a sample (SamplingParams.logprobs must "
            "be set)"
        )
    return Generation(
        prompt_ids=list(prompt_ids),
        response_ids=tokens,
        logprobs=[step[tok].logprob for tok, step in zip(tokens, completion.logprobs, strict=True)],
        text=completion.text,
        finish_reason=finish_reason(completion.finish_reason),
        extra={"model_version": model_version},
    )


class VLLMRolloutEngine(PromptEncoding):
    """Rollout engine on ``vllm.LLM`` (one engine per Ray actor; TP inside vLLM)."""

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        max_prompt_tokens: int | None = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        enforce_eager: bool = False,
        enable_prefix_caching: bool = True,
        enable_chunked_prefill: bool = True,
        chat_template: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        **engine_args: Any,
    ) -> None:
        import vllm

        for name in HF_ONLY_OPTIONS:
            engine_args.pop(name, None)
        self._vllm = vllm
        self.seed = seed
        self.max_model_len = max_model_len
        self.max_prompt_tokens = max_prompt_tokens
        self._calls = 0
        self.model_version = 0
        self.llm = vllm.LLM(
            model=model_path,
            tensor_parallel_size=tensor_parallel_size,
            dtype=vllm_dtype(dtype),
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            max_model_len=max_model_len,
            enable_prefix_caching=enable_prefix_caching,
            enable_chunked_prefill=enable_chunked_prefill,
            logprobs_mode=LOGPROBS_MODE,
            worker_extension_cls=WORKER_EXTENSION,
            **engine_args,
        )
        self.tokenizer = self.llm.get_tokenizer()
        if chat_template:
            self.tokenizer.chat_template = chat_template
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        from vllm.inputs import TokensPrompt

        if not prompt_ids:
            return []
        prompt_ids = self.fit_prompts(prompt_ids)
        self._check_prompt_lengths(prompt_ids)
        seed = params.seed if params.seed is not None else self.seed * 1_000_003 + self._calls
        self._calls += 1
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids],
            sampling_params=self._vllm.SamplingParams(**sampling_kwargs(params, seed)),
            use_tqdm=False,
        )
        return [
            [completion_to_generation(p, c, self.model_version) for c in request.outputs]
            for p, request in zip(prompt_ids, outputs, strict=True)
        ]

    def _check_prompt_lengths(self, prompt_ids: list[list[int]]) -> None:
        """The hf engine's rule, before vLLM's own ValueError: a prompt must leave room for at
        least one response token. vLLM itself ends a response at ``max_model_len`` ("length")."""
        if min(len(p) for p in prompt_ids) == 0:
            raise DataError("an empty prompt was given to the rollout engine")
        longest = max(len(p) for p in prompt_ids)
        if self.max_model_len is not None and longest >= self.max_model_len:
            raise DataError(
                f"a prompt of {longest} tokens does not fit model.max_model_len="
                f"{self.max_model_len}; raise max_model_len or lower model.max_prompt_tokens"
            )

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        named = [(name, t.detach().cpu()) for name, t in state_dict.items()]
        self.llm.collective_rpc("rft_load_weights", args=(named,))
        self.llm.reset_prefix_cache()
        self.model_version = int(version)
