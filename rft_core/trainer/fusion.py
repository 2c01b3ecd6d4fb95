"""Fused element-wise work in the trainer's decoder layers, through ``torch.compile``
(``trainer.use_torch_compile``).

On an H200 the bf16 matrix products were under half of the trainer's GPU time
(benchmarks/RESULTS.md, run 4): the rest was element-wise kernels, each reading and writing
whole activations: RMSNorm's fp32 upcast, square, mean, rsqrt and two products; SwiGLU's SiLU and
product; the casts between them. Inductor fuses each such chain into one kernel forward and one
backward, and its partitioner recomputes cheap element-wise values in the backward instead of
keeping them, which also lowers activation memory.

What is compiled (``scope``):

- ``"parts"``: each layer's two RMSNorms, its MLP and the final norm: modules that take one
  tensor and keep no state, so they compile the same for every layer, whatever the attention
  mask or KV cache of the call (the shared-prompt layout passes a ``DynamicCache`` through the
  layers, which compiled code would guard on);
- ``"layers"``: each whole decoder layer (RoPE and the attention's projections too); the most
  fusion, but the layer's arguments (masks, caches) become guards.

Sequence lengths change from step to step; ``dynamic=None`` lets a second shape recompile once
with symbolic sizes instead of once per shape. Liger's hand-written Triton kernels do the same
fusions for a list of architectures; compiling the model's own modules keeps every architecture
transformers has, with nothing to patch. CPU trainers stay eager (compilation there costs more
than it saves on the tiny models CPUs train).
"""

from __future__ import annotations

from typing import Any

import torch

COMPILE_SCOPES = ("parts", "layers")
DEFAULT_SCOPE = "parts"


def decoder_layers(model: Any) -> list[Any]:
    """The decoder layers of a causal LM from transformers (``model.model.layers``); [] when
    the model is laid out otherwise."""
    body = getattr(model, "model", None)
    layers = getattr(body, "layers", None)
    return list(layers) if layers is not None else []


def compile_model(model: Any, scope: str = DEFAULT_SCOPE) -> int:
    """Compile ``model``'s decoder in place at ``scope`` (module docstring); returns the number
    of modules compiled (0: nothing recognisable to compile, the model stays eager)."""
    if scope not in COMPILE_SCOPES:
        raise ValueError(f"compile scope must be one of {COMPILE_SCOPES}, got {scope!r}")
    modules: list[torch.nn.Module] = []
    for layer in decoder_layers(model):
        if scope == "layers":
            modules.append(layer)
            continue
        for name in ("input_layernorm", "post_attention_layernorm", "mlp"):
            part = getattr(layer, name, None)
            if isinstance(part, torch.nn.Module):
                modules.append(part)
    final_norm = getattr(getattr(model, "model", None), "norm", None)
    if modules and scope == "parts" and isinstance(final_norm, torch.nn.Module):
        modules.append(final_norm)
    for module in modules:
        module.compile(dynamic=None)
    return len(modules)


def wants_compile(use_torch_compile: bool | None, device: torch.device) -> bool:
    """``trainer.use_torch_compile``: None compiles on CUDA only."""
    if use_torch_compile is None:
        return device.type == "cuda"
    return bool(use_torch_compile)
