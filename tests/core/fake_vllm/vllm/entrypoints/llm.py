"""``vllm.LLM``: the constructor signature of vLLM 0.26 (its own keyword arguments, the rest
forwarded to ``EngineArgs``, where an unknown one is a ``TypeError``), ``generate``,
``collective_rpc`` (its arguments through vLLM's msgpack round trip unless
``VLLM_ENABLE_V1_MULTIPROCESSING=0``), ``sleep`` / ``wake_up``, ``reset_prefix_cache`` and
``get_tokenizer``.

What it does instead of running a model: loads the real tokenizer and the real Hugging Face
weights (CPU) of ``model``, builds one worker per tensor-parallel rank with the
``worker_extension_cls`` mixed in as vLLM does, and answers ``generate`` with deterministic
token ids, per-token ``Logprob`` dicts and finish reasons. Every call is recorded on the
instance (``init_kwargs``, ``generate_calls``, ``rpc_calls``, ``events``).
"""

import importlib
import inspect
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from vllm import envs
from vllm.inputs import TOKENS_PROMPT_KEYS
from vllm.logprobs import FlatLogprobs, Logprob
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.sampling_params import SamplingParams
from vllm.serial_utils import round_trip

# EngineArgs fields of vLLM 0.26 that LLM forwards from **kwargs (the ones RL frameworks pass)
ENGINE_ARGS = frozenset(
    {
        "max_model_len",
        "enable_prefix_caching",
        "enable_chunked_prefill",
        "logprobs_mode",
        "worker_extension_cls",
        "worker_cls",
        "distributed_executor_backend",
        "pipeline_parallel_size",
        "data_parallel_size",
        "enable_expert_parallel",
        "max_num_seqs",
        "max_num_batched_tokens",
        "block_size",
        "kv_cache_dtype",
        "disable_log_stats",
        "enable_lora",
        "max_lora_rank",
        "max_loras",
        "load_format",
        "enable_sleep_mode",
        "generation_config",
        "override_generation_config",
        "async_scheduling",
        "max_logprobs",
        "reasoning_parser",
        "calculate_kv_scales",
    }
)
MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
LOGPROBS_MODES = ("raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits")


def resolve_obj_by_qualname(qualname: str) -> Any:
    module_name, obj_name = qualname.rsplit(".", 1)
    return getattr(importlib.import_module(module_name), obj_name)


class ModelForCausalLM(torch.nn.Module):
    """A vLLM model's weight interface over the Hugging Face model: ``load_weights`` takes
    ``(hf_name, tensor)`` pairs, skips ``lm_head.`` when embeddings are tied, rejects unknown
    names and returns the set of loaded names (vLLM's ``AutoWeightsLoader`` behaviour)."""

    def __init__(self, model_path: str) -> None:
        super().__init__()
        from transformers import AutoModelForCausalLM

        self.hf = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32)
        tied = getattr(self.hf.config, "tie_word_embeddings", False)
        self.skip_prefixes = ("lm_head.",) if tied else ()
        self.offloaded = False  # sleep level 1: the weights are in CPU RAM, not on the GPU

    def load_weights(self, weights: Any) -> set[str]:
        if self.offloaded:
            raise RuntimeError("load_weights into a sleeping engine: wake_up(['weights']) first")
        params = dict(self.hf.named_parameters())
        loaded = set()
        for name, tensor in weights:
            if name.startswith(self.skip_prefixes):
                continue
            if name not in params:
                raise ValueError(f"There is no module or parameter named '{name}' in the model")
            with torch.no_grad():
                params[name].copy_(tensor)
            loaded.add(name)
        return loaded


class GPUModelRunner:
    """vLLM 0.26's ``GPUModelRunner``: ``.model`` may be a CUDA-graph wrapper there, so a
    worker extension reaches the model through ``get_model()`` (which unwraps it)."""

    def __init__(self, model: ModelForCausalLM) -> None:
        self.model = model

    def get_model(self) -> ModelForCausalLM:
        return self.model


class Worker:
    """vLLM's V1 GPU worker as seen by a worker extension: ``self.model_runner.model``."""

    def __init__(self, rank: int, model_path: str) -> None:
        self.rank = rank
        self.model_runner = GPUModelRunner(ModelForCausalLM(model_path))


def extended_worker_class(worker_extension_cls: str | None) -> type:
    if not worker_extension_cls:
        return Worker
    extension = resolve_obj_by_qualname(worker_extension_cls)
    for attr in dir(extension):
        if attr.startswith("__"):
            continue
        assert not hasattr(Worker, attr), (
            f"Worker class {Worker} already has an attribute {attr}, which conflicts with the "
            f"worker extension class {extension}."
        )
    return type("Worker", (Worker, extension), {})


class LLM:
    def __init__(
        self,
        model: str,
        *,
        runner: str = "auto",
        convert: str = "auto",
        tokenizer: str | None = None,
        tokenizer_mode: str = "auto",
        skip_tokenizer_init: bool = False,
        trust_remote_code: bool = False,
        allowed_local_media_path: str = "",
        allowed_media_domains: list[str] | None = None,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        quantization: str | None = None,
        revision: str | None = None,
        tokenizer_revision: str | None = None,
        seed: int | None = None,
        gpu_memory_utilization: float = 0.9,
        swap_space: float = 4,
        cpu_offload_gb: float = 0,
        enforce_eager: bool = False,
        disable_custom_all_reduce: bool = False,
        hf_token: bool | str | None = None,
        hf_overrides: Any = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        pooler_config: Any = None,
        override_pooler_config: Any = None,
        structured_outputs_config: Any = None,
        kv_cache_memory_bytes: int | None = None,
        compilation_config: Any = None,
        logits_processors: Any = None,
        **kwargs: Any,
    ) -> None:
        from transformers import AutoConfig, AutoTokenizer

        # vLLM 0.26's V2 model runner (Qwen2 among its default models) checks for the FlashInfer
        # sampler by importing flashinfer unless VLLM_USE_FLASHINFER_SAMPLER=0: without the
        # flashinfer package the engine core fails at start (seen on the H200, 2026-12-05)
        if os.environ.get("VLLM_USE_FLASHINFER_SAMPLER", "1") != "0":
            import importlib.util

            if importlib.util.find_spec("flashinfer") is None:
                raise ModuleNotFoundError("No module named 'flashinfer'")
        signature = inspect.signature(LLM.__init__)
        explicit = {
            name: value
            for name, value in locals().items()
            if name in signature.parameters and name not in ("self", "kwargs")
        }
        unknown = sorted(set(kwargs) - ENGINE_ARGS)
        if unknown:
            raise TypeError(
                f"EngineArgs.__init__() got an unexpected keyword argument {unknown[0]!r}"
            )
        if dtype not in MODEL_DTYPES:
            raise ValueError(f"Unknown dtype: {dtype!r}. Valid options: {MODEL_DTYPES}")
        mode = kwargs.get("logprobs_mode", "raw_logprobs")
        if mode not in LOGPROBS_MODES:
            raise ValueError(f"Invalid logprobs_mode {mode!r}; choose one of {LOGPROBS_MODES}")
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}"
            )
        if tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
        self.init_kwargs = {**explicit, **kwargs}
        self.seed = seed
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer or model)
        hf_config = AutoConfig.from_pretrained(model)
        self.max_model_len = kwargs.get("max_model_len") or hf_config.max_position_embeddings
        worker_class = extended_worker_class(kwargs.get("worker_extension_cls"))
        self.workers = [worker_class(rank, model) for rank in range(tensor_parallel_size)]
        self.generate_calls: list[dict[str, Any]] = []
        self.rpc_calls: list[dict[str, Any]] = []
        self.events: list[str] = []
        self._request_counter = 0
        self.sleeping: set[str] = set()  # "weights", "kv_cache"
        self.multiprocessing = bool(envs.VLLM_ENABLE_V1_MULTIPROCESSING)

    def get_tokenizer(self, lora_request: Any = None) -> Any:
        return self.tokenizer

    def reset_prefix_cache(self, device: Any = None) -> bool:
        self.events.append("reset_prefix_cache")
        return True

    def sleep(self, level: int = 1) -> None:
        """Level 1: weights offloaded to CPU RAM, KV cache discarded; level 2 discards both."""
        if not self.init_kwargs.get("enable_sleep_mode"):
            raise ValueError("Sleep mode is not enabled (LLM(..., enable_sleep_mode=True))")
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        self.events.append(f"sleep:{level}")
        self.reset_prefix_cache()  # vLLM drops the prefix cache with the KV cache
        self.sleeping = {"weights", "kv_cache"}
        for worker in self.workers:
            worker.model_runner.model.offloaded = True

    def wake_up(self, tags: list[str] | None = None) -> None:
        tags = ["weights", "kv_cache"] if tags is None else list(tags)
        unknown = sorted(set(tags) - {"weights", "kv_cache"})
        if unknown:
            raise ValueError(f"unknown wake_up tags {unknown}")
        self.events.append("wake_up:" + ",".join(tags))
        self.sleeping.difference_update(tags)
        if "weights" in tags:
            for worker in self.workers:
                worker.model_runner.model.offloaded = False

    def collective_rpc(
        self,
        method: str | Callable[..., Any],
        timeout: float | None = None,
        args: tuple = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        self.events.append(f"collective_rpc:{method}")
        self.rpc_calls.append(
            {"method": method, "timeout": timeout, "args": args, "kwargs": kwargs}
        )
        if self.multiprocessing:  # the engine core is another process: msgpack both ways
            args, kwargs = round_trip(list(args)), round_trip(kwargs or {})
        calls = [
            getattr(w, method) if isinstance(method, str) else method.__get__(w)
            for w in self.workers
        ]
        if len(calls) == 1:
            results = [calls[0](*args, **(kwargs or {}))]
        else:  # vLLM's workers run at once (a collective among them must not deadlock)
            with ThreadPoolExecutor(len(calls)) as pool:
                futures = [pool.submit(fn, *args, **(kwargs or {})) for fn in calls]
                results = [f.result() for f in futures]
        return round_trip(results) if self.multiprocessing else results

    def generate(
        self,
        prompts: Any,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool | Callable[..., Any] = True,
        lora_request: Any = None,
        priority: list[int] | None = None,
    ) -> list[RequestOutput]:
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        if sampling_params is None:
            sampling_params = SamplingParams()
        params = (
            list(sampling_params)
            if isinstance(sampling_params, Sequence)
            else [sampling_params] * len(prompts)
        )
        if len(params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        for sp in params:
            if not isinstance(sp, SamplingParams):
                raise TypeError(f"sampling_params must be vllm.SamplingParams, got {type(sp)}")
        if self.sleeping:
            raise RuntimeError(f"generate on a sleeping engine ({sorted(self.sleeping)} asleep)")
        self.events.append("generate")
        self.generate_calls.append(
            {"prompts": prompts, "sampling_params": params, "use_tqdm": use_tqdm}
        )
        outputs = [self._request(p, sp) for p, sp in zip(prompts, params, strict=True)]
        self.generate_calls[-1]["outputs"] = outputs
        return outputs

    # ---- the deterministic stand-in for sampling ----------------------------------------

    def _request(self, prompt: Any, sp: SamplingParams) -> RequestOutput:
        if isinstance(prompt, str):
            prompt_ids, text = self.tokenizer(prompt)["input_ids"], prompt
        else:
            unknown = sorted(set(prompt) - TOKENS_PROMPT_KEYS)
            if unknown:
                raise ValueError(f"unexpected prompt keys {unknown}")
            prompt_ids, text = list(prompt["prompt_token_ids"]), None
        if not prompt_ids:
            raise ValueError("The decoder prompt cannot be empty")
        if len(prompt_ids) > self.max_model_len:
            raise ValueError(
                f"The decoder prompt (length {len(prompt_ids)}) is longer than the maximum "
                f"model length of {self.max_model_len}."
            )
        index = self._request_counter
        self._request_counter += 1
        room = self.max_model_len - len(prompt_ids)
        budget = room if sp.max_tokens is None else min(sp.max_tokens, room)
        seed = sp.seed if sp.seed is not None else (self.seed or 0)
        # greedy is a function of the prompt (as in vLLM: the argmax); sampling also of the request
        greedy = sp.temperature < 1e-5
        key = hash(tuple(prompt_ids)) % 2**31 if greedy else seed * 7919 + index
        gen = torch.Generator().manual_seed(key)
        completions = [self._completion(j, budget, sp, gen) for j in range(sp.n)]
        return RequestOutput(
            request_id=str(index),
            prompt=text,
            prompt_token_ids=prompt_ids,
            prompt_logprobs=None,
            outputs=completions,
            finished=True,
        )

    def _completion(
        self, j: int, budget: int, sp: SamplingParams, gen: torch.Generator
    ) -> CompletionOutput:
        """Even samples run to the budget ("length"); odd sample j ends with EOS after j+1
        tokens ("stop", the EOS stays in token_ids) when that fits the budget."""
        eos = self.tokenizer.eos_token_id
        special = set(self.tokenizer.all_special_ids)
        ordinary = [i for i in range(len(self.tokenizer)) if i not in special]
        stops = j % 2 == 1 and j + 1 <= budget and not sp.ignore_eos
        length = j + 1 if stops else budget
        picks = torch.randint(len(ordinary), (length,), generator=gen).tolist()
        tokens = [ordinary[i] for i in picks]
        if stops:
            tokens[-1] = eos
        values = [-0.125 * (k + 1) - 0.5 * j for k in range(length)]
        logprobs = None
        if sp.logprobs is not None:
            logprobs = FlatLogprobs() if sp.flat_logprobs else []  # a SamplingParams field in 0.26
            for k, (tok, value) in enumerate(zip(tokens, values, strict=True)):
                step = {
                    tok: Logprob(value, rank=1 + k % 3, decoded_token=self.tokenizer.decode([tok]))
                }
                for alt in ordinary[: sp.logprobs]:  # the top-k alternatives when asked for
                    step.setdefault(alt, Logprob(value - 1.0, rank=2, decoded_token=None))
                logprobs.append(step)
        text = (
            self.tokenizer.decode(tokens, skip_special_tokens=sp.skip_special_tokens)
            if sp.detokenize
            else ""
        )
        return CompletionOutput(
            index=j,
            text=text,
            token_ids=tokens,
            cumulative_logprob=sum(values) if logprobs is not None else None,
            logprobs=logprobs,
            finish_reason="stop" if stops else "length",
            stop_reason=None,
        )
