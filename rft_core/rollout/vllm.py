"""The ``vllm`` rollout engine for GPU nodes, written against vLLM's public offline API.

Targets vLLM 0.26.x (V1 engine), the version run on the lent H200 (issue 21); the tested range
is pinned in ``pyproject.toml``'s ``vllm`` extra and checked by ``rft_core.rollout.vllm_version``
(a vLLM outside it is one ``ConfigError`` line before any actor starts). The API used, and
reproduced by the fake package in ``tests/core/fake_vllm`` that the CPU tests run this module
against (vLLM cannot be installed on the CPU machines this project is tested on):

- ``vllm.LLM(model, *, tensor_parallel_size, dtype, seed, gpu_memory_utilization,
  enforce_eager, **engine_args)`` with the ``EngineArgs`` fields ``max_model_len``,
  ``enable_prefix_caching``, ``enable_chunked_prefill``, ``logprobs_mode``, ``max_num_seqs``,
  ``enable_sleep_mode`` and ``worker_extension_cls``; an unknown keyword is a ``TypeError``;
- ``vllm.SamplingParams(n, temperature, top_p, top_k, max_tokens, logprobs, seed, ignore_eos,
  detokenize)``: ``top_k=0`` disables top-k, ``logprobs=0`` returns the log-prob of the sampled
  token only; greedy (temperature below 1e-5) with ``n > 1`` is a ``ValueError`` ("n must be 1
  when using greedy sampling"), so a greedy group of n goes as n requests of n=1 (Trinity-RFT's
  semantics: n identical greedy samples, each with its log-probs), regrouped per prompt;
- ``LLM.generate(prompts, sampling_params, *, use_tqdm)`` with ``vllm.inputs.TokensPrompt``;
- ``RequestOutput.outputs[i]`` = ``CompletionOutput(index, text, token_ids,
  cumulative_logprob, logprobs, finish_reason, stop_reason)``; ``logprobs`` holds one entry per
  generated token, ``{token_id: Logprob(logprob, rank, decoded_token)}`` (or vLLM's flat
  container, whose ``.logprobs`` list is read directly); ``finish_reason`` is "stop", "length"
  or "abort";
- ``LLM.collective_rpc(method, timeout=None, args=(), kwargs=None)`` into the
  ``worker_extension_cls`` mixin (``rft_core.rollout.vllm_sync``; its arguments are
  msgpack-encoded when the engine core runs in its own process, the default);
  ``LLM.sleep(level)``, ``LLM.wake_up(tags)``, ``LLM.reset_prefix_cache()``,
  ``LLM.get_tokenizer()``.

Prompts: chat conversations are rendered here with the tokenizer's chat template (the same
``PromptEncoding`` as the hf engine), then sent as token ids, so the prompt ids the trainer sees
are exactly the ones vLLM sampled from.

Rollout overhead: vLLM's detokenizer is off (``detokenize=False``): it decodes every request
incrementally, token by token, in the frontend's output loop. Workflows do need the response
text (rewards parse it), so the adapter decodes all responses of a call at once, in the fast
tokenizer's Rust ``decode_batch`` (``decode_all``; measured on this CPU machine for 2,048 x 256
tokens: 0.09 s, against 0.16 s for transformers' ``batch_decode``, 0.27 s row by row and about
1 s token by token with ``DecodeStream``, the incremental way a streaming detokenizer goes; the
text equals ``decode(ids, skip_special_tokens=True)``). Log-probs are read without
building per-token objects: ``flat_logprobs=True`` asks vLLM for its flat container. ``max_num_seqs`` comes from the
batch (``engine_settings``: ``buffer.batch_size x algorithm.repeat_times``, at least vLLM's
default 256) unless ``extra_engine_args`` sets it.

Log-probs: ``logprobs_mode="processed_logprobs"`` gives them after temperature and
top-k/top-p. With the defaults (top_p = 1, top_k off) that is exactly the hf engine's
convention (``log_softmax(logits / temperature)``).

Weights (``load_weights``): see ``rft_core.rollout.vllm_sync`` for the paths (in-process
tensors, CUDA IPC buckets, NCCL broadcast buckets); the prefix cache is reset afterwards (its KV
blocks were computed with the old weights). Colocated (``enable_sleep_mode``, set by
``engine_settings`` for ``mode: colocate``): ``release_memory`` (the hook the colocate loop calls
while the trainer steps, as for the hf engine) puts vLLM to sleep at level 1 (KV cache freed,
weights offloaded to CPU RAM); ``load_weights`` wakes the weights only (``wake_up(["weights"])``)
before loading, so the KV cache is not allocated alongside the incoming buckets, and the next
generate wakes the KV cache (``wake_up(["kv_cache"])``).
"""

from __future__ import annotations

import importlib.util
import os
import time
from typing import Any

import torch

from rft_core import dtypes
from rft_core.errors import DataError, RFTError
from rft_core.rollout.base import Generation, PromptEncoding, SamplingParams
from rft_core.rollout.vllm_sync import WorkerExtension, send_in_process, send_ipc
from rft_core.sync.nccl import DEFAULT_BUCKET_BYTES, TensorMeta

WORKER_EXTENSION = "rft_core.rollout.vllm_sync.WorkerExtension"
LOGPROBS_MODE = "processed_logprobs"
HF_ONLY_OPTIONS = ("device", "num_threads", "attn_implementation", "model", "tokenizer")
GREEDY_EPS = 1e-5  # vLLM's _SAMPLING_EPS: a temperature below it is greedy
SLEEP_LEVEL = 1  # weights kept (offloaded to CPU RAM), KV cache freed
# vLLM 0.26's flat log-prob container (a ``SamplingParams`` field there: one list per field for
# all positions instead of a dict and a ``Logprob`` object per token)
FLAT_LOGPROBS = True


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


def is_greedy(params: SamplingParams) -> bool:
    return params.temperature < GREEDY_EPS


def sampling_kwargs(params: SamplingParams, seed: int) -> dict[str, Any]:
    """Our ``SamplingParams`` as ``vllm.SamplingParams`` keyword arguments (a greedy group is
    sent as n=1 requests: see ``VLLMRolloutEngine.generate_ids``)."""
    return {
        "n": 1 if is_greedy(params) else params.n,
        "temperature": max(params.temperature, 0.0),  # 0 = greedy in vLLM too
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else 0,  # 0 = off
        "max_tokens": params.max_tokens,
        "logprobs": 0,  # only the sampled token's log-prob
        "seed": seed,
        "ignore_eos": params.ignore_eos,
        "detokenize": False,  # one batch_decode here instead (module docstring)
        "flat_logprobs": FLAT_LOGPROBS,
    }


def finish_reason(reason: str | None) -> str:
    """vLLM's ``CompletionOutput.finish_reason`` as ours ("stop" | "length"). An aborted request
    is an engine failure, never a sample to train on."""
    if reason in ("stop", "length"):
        return reason
    raise RuntimeError(f"vLLM finished a request with finish_reason={reason!r}")


def sampled_logprobs(tokens: list[int], logprobs: Any) -> list[float]:
    """The log-prob of each sampled token: vLLM's flat container's ``.logprobs`` list as it is
    (one entry per position with ``logprobs=0``), else one dict lookup per position."""
    if logprobs is None or len(logprobs) != len(tokens):
        raise RuntimeError(
            "vLLM returned no per-token log-probs for a sample (SamplingParams.logprobs must "
            "be set)"
        )
    flat = getattr(logprobs, "logprobs", None)  # FlatLogprobs: a list (or numpy column)
    if flat is not None and not callable(flat) and len(flat) == len(tokens):
        return flat.tolist() if hasattr(flat, "tolist") else list(flat)
    return [step[tok].logprob for tok, step in zip(tokens, logprobs, strict=True)]


def decode_all(tokenizer: Any, rows: list[list[int]]) -> list[str]:
    """Every response's text in one call: the fast tokenizer's own (Rust) ``decode_batch`` where
    there is one (what vLLM's detokenizer uses too, without transformers' per-row Python), else
    ``batch_decode``; special tokens skipped, as vLLM's default."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend.decode_batch(rows, skip_special_tokens=True)
    return tokenizer.batch_decode(rows, skip_special_tokens=True)


def completion_to_generation(
    prompt_ids: list[int], completion: Any, model_version: int, text: str | None = None
) -> Generation:
    """One ``CompletionOutput`` as a ``Generation`` (log-prob of each sampled token)."""
    tokens = list(completion.token_ids)
    return Generation(
        prompt_ids=prompt_ids,
        response_ids=tokens,
        logprobs=sampled_logprobs(tokens, completion.logprobs),
        text=completion.text if text is None else text,
        finish_reason=finish_reason(completion.finish_reason),
        extra={"model_version": model_version},
    )


def multiprocessing_enabled(vllm: Any) -> bool:
    """vLLM's ``VLLM_ENABLE_V1_MULTIPROCESSING`` (default on: the engine core in its own process)."""
    envs = getattr(vllm, "envs", None)
    value = getattr(envs, "VLLM_ENABLE_V1_MULTIPROCESSING", None) if envs is not None else None
    if value is None:
        value = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") not in ("0", "false", "False")
    return bool(value)


def use_installed_sampler() -> None:
    """vLLM 0.26's V2 model runner (the default for Qwen2 and most dense models) builds its
    sampler with FlashInfer unless ``VLLM_USE_FLASHINFER_SAMPLER=0``, and decides by importing
    ``flashinfer``: without the ``flashinfer-python`` package (an install that left it out, a
    platform with no wheel) the engine core fails at start with "No module named 'flashinfer'"
    (seen on the H200, 2026-12-05). So, only when flashinfer is not importable and the user set
    nothing, vLLM's own PyTorch/Triton sampler is chosen; the variable is inherited by the engine
    core and its workers."""
    if "VLLM_USE_FLASHINFER_SAMPLER" not in os.environ and not importlib.util.find_spec(
        "flashinfer"
    ):
        os.environ["VLLM_USE_FLASHINFER_SAMPLER"] = "0"


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
        sync_bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        **engine_args: Any,
    ) -> None:
        use_installed_sampler()

        import vllm

        for name in HF_ONLY_OPTIONS:
            engine_args.pop(name, None)
        self._vllm = vllm
        self.seed = seed
        self.max_model_len = max_model_len
        self.max_prompt_tokens = max_prompt_tokens
        self.tensor_parallel_size = tensor_parallel_size
        self.sync_bucket_bytes = int(sync_bucket_bytes)
        self._calls = 0
        self.model_version = 0
        self.last_sync_s: float | None = None
        self.sleep_enabled = bool(engine_args.get("enable_sleep_mode", False))
        self.asleep: set[str] = set()  # the sleeping memory tags: "weights", "kv_cache"
        self.dtype = getattr(torch, vllm_dtype(dtype), None)
        # the worker is this process's own only with the in-process client and one worker
        backend = engine_args.get("distributed_executor_backend")
        self.in_process = (
            tensor_parallel_size == 1
            and backend in (None, "uni")
            and not multiprocessing_enabled(vllm)
        )
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
        self._broadcast_joined = False

    # -- generation --------------------------------------------------------------------------

    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        # optional: vllm
        from vllm.inputs import TokensPrompt

        if not prompt_ids:
            return []
        prompt_ids = self.fit_prompts(prompt_ids)
        self._check_prompt_lengths(prompt_ids)
        self._wake(("weights", "kv_cache"))
        seed = params.seed if params.seed is not None else self.seed * 1_000_003 + self._calls
        self._calls += 1
        # greedy n > 1: vLLM refuses it; n identical requests of n=1 instead (Trinity-RFT)
        copies = params.n if is_greedy(params) else 1
        prompts = [
            TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids for _ in range(copies)
        ]
        outputs = self.llm.generate(
            prompts,
            sampling_params=self._vllm.SamplingParams(**sampling_kwargs(params, seed)),
            use_tqdm=False,
        )
        completions = [c for request in outputs for c in request.outputs]
        texts = decode_all(self.tokenizer, [list(c.token_ids) for c in completions])
        per_prompt = len(completions) // len(prompt_ids)
        version = self.model_version
        groups: list[list[Generation]] = []
        for i, prompt in enumerate(prompt_ids):
            lo = i * per_prompt
            groups.append(
                [
                    completion_to_generation(prompt, c, version, text)
                    for c, text in zip(
                        completions[lo : lo + per_prompt], texts[lo : lo + per_prompt], strict=True
                    )
                ]
            )
        return groups

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

    # -- sleep / wake (colocate) -------------------------------------------------------------

    def release_memory(self) -> None:
        """Colocate: vLLM sleeps at level 1 while the trainer steps (KV cache freed, weights
        offloaded to CPU RAM); a no-op without ``enable_sleep_mode`` or when already asleep."""
        if not self.sleep_enabled or self.asleep:
            return
        self.llm.sleep(level=SLEEP_LEVEL)
        self.asleep = {"weights", "kv_cache"}

    def _wake(self, tags: tuple[str, ...]) -> None:
        wanted = [t for t in tags if t in self.asleep]
        if wanted:
            self.llm.wake_up(tags=wanted)
            self.asleep.difference_update(wanted)

    # -- weights -----------------------------------------------------------------------------

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """New weights into every worker: the trainer's tensors themselves for an in-process
        engine, else CUDA IPC handles of packed buckets staged on this process's GPU (the
        engine's; the CPU when there is none, which only the fake vLLM of the tests meets)."""
        start = time.perf_counter()
        self._wake(("weights",))  # weights only: no KV cache beside the incoming buckets
        if self.in_process:
            send_in_process(self.llm, state_dict)
        else:
            device = (
                torch.device("cuda", torch.cuda.current_device())
                if torch.cuda.is_available()
                else torch.device("cpu")
            )
            send_ipc(self.llm, state_dict, self.dtype, device, self.sync_bucket_bytes)
        self._after_load(version, start)

    def receive_broadcast(
        self,
        addr: str,
        port: int,
        metas: list[TensorMeta],
        version: int,
        timeout_s: float = 600.0,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> None:
        """``sync_method: nccl`` (mode both): every worker joins the trainer's broadcast group
        as rank 1 + its TP rank (once per run) and loads the buckets as they arrive."""
        start = time.perf_counter()
        self._wake(("weights",))
        plain = [[m.name, list(m.shape), m.dtype] for m in metas]
        if not self._broadcast_joined:
            world = 1 + self.tensor_parallel_size
            self.llm.collective_rpc("rft_join_broadcast", args=(addr, port, world, timeout_s))
            self._broadcast_joined = True
        self.llm.collective_rpc("rft_receive_broadcast", args=(plain, bucket_bytes))
        self._after_load(version, start)

    @property
    def broadcast_receivers(self) -> int:
        """How many ranks of this engine join a weight broadcast (one per TP worker)."""
        return self.tensor_parallel_size

    def _after_load(self, version: int, start: float) -> None:
        if "kv_cache" not in self.asleep:  # sleeping freed the cache (and its prefix entries)
            self.llm.reset_prefix_cache()
        self.model_version = int(version)
        self.last_sync_s = time.perf_counter() - start


__all__ = ["WORKER_EXTENSION", "VLLMRolloutEngine", "WorkerExtension", "sampling_kwargs"]
