"""The ``vllm`` rollout engine for GPU nodes, written against vLLM's public offline API.

Assumes vLLM ≥ 0.10 (the V1 engine): ``vllm.LLM(..., logprobs_mode="processed_logprobs",
worker_extension_cls=...)``, ``SamplingParams(n, temperature, top_p, top_k, max_tokens,
logprobs=0, seed)``, ``llm.generate`` with ``TokensPrompt`` and ``llm.collective_rpc``.
vLLM is not installed on the CPU machines this project is tested on: this path is untested here.

Log-probs: ``processed_logprobs`` are taken after temperature and top-k/top-p. With the
defaults (top_p = 1, top_k = -1) that is exactly the hf engine's convention
(``log_softmax(logits / temperature)``, see ``rft_core.rollout.hf``); with top-k/top-p filtering
vLLM renormalises over the kept tokens, so the trainer's first ratio is not exactly 1.

Weights: the synchronizer calls ``load_weights(state_dict, version)``; the tensors go to every
vLLM worker through ``collective_rpc`` into ``WorkerExtension.rft_load_weights``, which hands
them to the model's own ``load_weights`` (it knows how to fuse qkv / gate_up and shard for TP).
"""

from __future__ import annotations

from typing import Any

import torch

from rft_core.rollout.base import Generation, SamplingParams
from rft_core.rollout.hf import PromptEncoding

WORKER_EXTENSION = "rft_core.rollout.vllm.WorkerExtension"


class WorkerExtension:
    """Mixed into vLLM's GPU worker (``worker_extension_cls``); runs inside each worker."""

    def rft_load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        model = self.model_runner.model  # type: ignore[attr-defined]
        device = next(model.parameters()).device
        loaded = model.load_weights(weights=((n, t.to(device)) for n, t in named_tensors))
        return len(loaded) if loaded is not None else len(named_tensors)


class VLLMRolloutEngine(PromptEncoding):
    """Rollout engine on ``vllm.LLM`` (one engine per Ray actor; TP inside vLLM)."""

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        enforce_eager: bool = False,
        enable_prefix_caching: bool = True,
        chat_template: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        **llm_kwargs: Any,
    ) -> None:
        import vllm

        for name in ("device", "num_threads", "attn_implementation", "model", "tokenizer"):
            llm_kwargs.pop(name, None)  # hf-engine options
        self._vllm = vllm
        self.seed = seed
        self._calls = 0
        self.model_version = 0
        self.llm = vllm.LLM(
            model=model_path,
            dtype={"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype),
            seed=seed,
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            enable_prefix_caching=enable_prefix_caching,
            logprobs_mode="processed_logprobs",
            worker_extension_cls=WORKER_EXTENSION,
            **llm_kwargs,
        )
        self.tokenizer = self.llm.get_tokenizer()
        if chat_template:
            self.tokenizer.chat_template = chat_template
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        from vllm.inputs import TokensPrompt

        seed = params.seed if params.seed is not None else self.seed * 1_000_003 + self._calls
        self._calls += 1
        sampling = self._vllm.SamplingParams(
            n=params.n,
            temperature=max(params.temperature, 0.0),
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            max_tokens=params.max_tokens,
            logprobs=0,  # only the sampled token's log-prob
            seed=seed,
        )
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids],
            sampling_params=sampling,
            use_tqdm=False,
        )
        groups: list[list[Generation]] = []
        for prompt, request in zip(prompt_ids, outputs, strict=True):
            group = []
            for completion in request.outputs:
                tokens = list(completion.token_ids)
                logprobs = [
                    step[tok].logprob for tok, step in zip(tokens, completion.logprobs, strict=True)
                ]
                group.append(
                    Generation(
                        prompt_ids=list(prompt),
                        response_ids=tokens,
                        logprobs=logprobs,
                        text=completion.text,
                        finish_reason="stop" if completion.finish_reason == "stop" else "length",
                        extra={"model_version": self.model_version},
                    )
                )
            groups.append(group)
        return groups

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        named = list(state_dict.items())
        self.llm.collective_rpc("rft_load_weights", args=(named,))
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        self.model_version = int(version)
