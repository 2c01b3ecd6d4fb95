"""Megatron-LM tensor/pipeline-parallel checkpoints of GPT-style (Llama/Qwen2) models.

Supported layout (Megatron's legacy per-rank ``torch`` format, what ``save_checkpoint`` with
``--ckpt-format torch`` writes)::

    actor/mp_rank_<TT>/model_optim_rng.pt            pipeline size 1 (TT = tensor rank, 2 digits)
    actor/mp_rank_<TT>_<PPP>/model_optim_rng.pt      pipeline size > 1 (PPP = stage, 3 digits)

Each file holds ``{"model": state_dict, ...}`` (or the state dict itself) with Megatron-core
GPT names; ``_extra_state`` entries are ignored. Pipeline stages number their layers from 0;
stage p's layers follow those of stages < p. Tensor-parallel splits (T ranks):

==========================================================  ==============================  ======================
Megatron-core name (per decoder layer ``decoder.layers.i``)  Hugging Face name               split across TP ranks
==========================================================  ==============================  ======================
``embedding.word_embeddings.weight``                         ``model.embed_tokens.weight``    dim 0 (vocab, padded)
``self_attention.linear_qkv.weight`` / ``.bias``             ``self_attn.{q,k,v}_proj``       dim 0, fused (below)
``self_attention.linear_qkv.layer_norm_weight``              ``input_layernorm.weight``       replicated
``self_attention.q_layernorm`` / ``k_layernorm``              ``self_attn.q_norm`` / ``k_norm`` replicated
``self_attention.linear_proj.weight``                        ``self_attn.o_proj.weight``      dim 1 (row-parallel)
``mlp.linear_fc1.weight``                                    ``mlp.gate_proj`` + ``up_proj``  dim 0, fused (below)
``mlp.linear_fc1.layer_norm_weight``                         ``post_attention_layernorm``     replicated
``mlp.linear_fc2.weight``                                    ``mlp.down_proj.weight``         dim 1 (row-parallel)
``decoder.final_layernorm.weight``                           ``model.norm.weight``            replicated
``output_layer.weight``                                      ``lm_head.weight``               dim 0 (vocab, padded)
==========================================================  ==============================  ======================

The local (non-Transformer-Engine) spec's ``input_layernorm.weight`` and
``pre_mlp_layernorm.weight`` are accepted in place of the fused ``layer_norm_weight`` entries.
Fused QKV: each rank holds its ``G/T`` query groups (G = ``num_key_value_heads``), each group
laid out as ``[q heads of the group (H/G heads), k head, v head]`` rows of ``head_dim``. Fused
fc1: each rank holds ``[gate rows of the rank; up rows of the rank]``. Vocab-parallel tensors
are padded to a multiple of the TP size; rows past ``vocab_size`` are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rft_core.checkpoint.formats.lazy import LazyStateDict, TensorSpec
from rft_core.checkpoint.shards import load_torch_file
from rft_core.errors import ConvertError

RANK_DIR_RE = re.compile(r"^mp_rank_(\d{2})(?:_(\d{3}))?$")
LAYER_RE = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
MODEL_FILE = "model_optim_rng.pt"

# per-layer Megatron suffix -> (HF suffix, TP split dim or None for replicated)
SIMPLE_LAYER_MAP = {
    "self_attention.linear_proj.weight": ("self_attn.o_proj.weight", 1),
    "self_attention.linear_proj.bias": ("self_attn.o_proj.bias", None),
    "mlp.linear_fc2.weight": ("mlp.down_proj.weight", 1),
    "mlp.linear_fc2.bias": ("mlp.down_proj.bias", None),
    "self_attention.linear_qkv.layer_norm_weight": ("input_layernorm.weight", None),
    "input_layernorm.weight": ("input_layernorm.weight", None),
    "mlp.linear_fc1.layer_norm_weight": ("post_attention_layernorm.weight", None),
    "pre_mlp_layernorm.weight": ("post_attention_layernorm.weight", None),
    "self_attention.q_layernorm.weight": ("self_attn.q_norm.weight", None),
    "self_attention.k_layernorm.weight": ("self_attn.k_norm.weight", None),
}


def _rank_dirs(actor_dir: Path) -> dict[tuple[int, int], Path]:
    found = {}
    for entry in sorted(actor_dir.iterdir()):
        m = RANK_DIR_RE.match(entry.name)
        if m and entry.is_dir():
            found[(int(m.group(1)), int(m.group(2) or 0))] = entry
    return found


def matches(actor_dir: Path) -> bool:
    return bool(_rank_dirs(actor_dir))


def _load_rank(path: Path) -> dict[str, Tensor]:
    obj = load_torch_file(path / MODEL_FILE)
    sd = obj.get("model", obj) if isinstance(obj, dict) else None
    if not isinstance(sd, dict):
        raise ConvertError(f"{path / MODEL_FILE}: expected a dict with a 'model' state dict")
    return {k: v for k, v in sd.items() if not k.endswith("_extra_state")}


def open_weights(actor_dir: Path, hf_config: Any) -> LazyStateDict:
    dirs = _rank_dirs(actor_dir)
    tp = 1 + max(t for t, _ in dirs)
    pp = 1 + max(p for _, p in dirs)
    for t in range(tp):
        for p in range(pp):
            if (t, p) not in dirs:
                raise ConvertError(
                    f"Megatron checkpoint in {actor_dir} lacks rank dir for tp={t} pp={p}"
                )
    # stages[p][t] = state dict of tensor rank t in pipeline stage p
    stages = [[_load_rank(dirs[(t, p)]) for t in range(tp)] for p in range(pp)]

    n_heads = hf_config.num_attention_heads
    n_groups = getattr(hf_config, "num_key_value_heads", None) or n_heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // n_heads
    if n_groups % tp:
        raise ConvertError(
            f"{actor_dir}: {n_groups} key/value heads cannot be split over tensor-parallel size {tp}"
        )
    vocab = hf_config.vocab_size

    recipes: dict[str, tuple[TensorSpec, Callable[[], Tensor]]] = {}

    def cat(ranks: list[dict], key: str, dim: int | None) -> Callable[[], Tensor]:
        if dim is None:
            return lambda: ranks[0][key]
        return lambda: torch.cat([r[key] for r in ranks], dim=dim)

    def add(name: str, fn: Callable[[], Tensor], shape: tuple[int, ...], dtype: torch.dtype):
        recipes[name] = (TensorSpec(tuple(shape), dtype), fn)

    def add_vocab(name: str, ranks: list[dict], key: str) -> None:
        local = ranks[0][key]
        padded = local.shape[0] * tp
        if padded < vocab:
            raise ConvertError(
                f"{actor_dir}: {key} has {padded} rows, config vocab_size is {vocab}"
            )
        add(
            name,
            lambda: torch.cat([r[key] for r in ranks], 0)[:vocab],
            (vocab, *local.shape[1:]),
            local.dtype,
        )

    layer_offset = 0
    for p, ranks in enumerate(stages):
        first = ranks[0]
        if "embedding.word_embeddings.weight" in first:
            add_vocab("model.embed_tokens.weight", ranks, "embedding.word_embeddings.weight")
        if "decoder.final_layernorm.weight" in first:
            t = first["decoder.final_layernorm.weight"]
            add(
                "model.norm.weight",
                cat(ranks, "decoder.final_layernorm.weight", None),
                t.shape,
                t.dtype,
            )
        if "output_layer.weight" in first:
            add_vocab("lm_head.weight", ranks, "output_layer.weight")
        local_layers = sorted({int(m.group(1)) for k in first if (m := LAYER_RE.match(k))})
        for j in local_layers:
            i = layer_offset + j
            prefix, out = f"decoder.layers.{j}.", f"model.layers.{i}."
            for key in [k for k in first if k.startswith(prefix)]:
                suffix = key[len(prefix) :]
                local = first[key]
                if suffix in SIMPLE_LAYER_MAP:
                    hf, dim = SIMPLE_LAYER_MAP[suffix]
                    shape = list(local.shape)
                    if dim is not None:
                        shape[dim] *= tp
                    add(out + hf, cat(ranks, key, dim), tuple(shape), local.dtype)
                elif suffix.startswith("self_attention.linear_qkv."):
                    kind = suffix.rsplit(".", 1)[1]  # weight | bias
                    for proj, fn, rows in _split_qkv(ranks, key, n_heads, n_groups, head_dim, tp):
                        add(
                            f"{out}self_attn.{proj}_proj.{kind}",
                            fn,
                            (rows, *local.shape[1:]),
                            local.dtype,
                        )
                elif suffix == "mlp.linear_fc1.weight":
                    for proj, fn in _split_fc1(ranks, key):
                        rows = local.shape[0] // 2 * tp
                        add(
                            f"{out}mlp.{proj}_proj.weight",
                            fn,
                            (rows, *local.shape[1:]),
                            local.dtype,
                        )
                else:
                    raise ConvertError(
                        f"{actor_dir}: unknown Megatron parameter {key!r} (stage {p}); the "
                        "supported names are listed in rft_core/checkpoint/formats/megatron.py"
                    )
        layer_offset += len(local_layers)

    specs = {name: spec for name, (spec, _) in recipes.items()}
    return LazyStateDict(
        specs, lambda name: recipes[name][1](), format_name=f"megatron tp={tp} pp={pp}"
    )


def _split_qkv(
    ranks: list[dict], key: str, n_heads: int, n_groups: int, head_dim: int, tp: int
) -> list[tuple[str, Callable[[], Tensor], int]]:
    per_group = n_heads // n_groups  # query heads per key/value group

    def part(which: str) -> Tensor:
        pieces = []
        for r in ranks:
            t = r[key]
            grouped = t.reshape(n_groups // tp, (per_group + 2) * head_dim, *t.shape[1:])
            q_rows = per_group * head_dim
            sl = {
                "q": slice(0, q_rows),
                "k": slice(q_rows, q_rows + head_dim),
                "v": slice(q_rows + head_dim, q_rows + 2 * head_dim),
            }[which]
            pieces.append(grouped[:, sl])
        full = torch.cat(pieces, dim=0)
        return full.reshape(-1, *full.shape[2:])

    return [
        ("q", lambda: part("q"), n_heads * head_dim),
        ("k", lambda: part("k"), n_groups * head_dim),
        ("v", lambda: part("v"), n_groups * head_dim),
    ]


def _split_fc1(ranks: list[dict], key: str) -> list[tuple[str, Callable[[], Tensor]]]:
    def part(index: int) -> Tensor:
        return torch.cat([torch.chunk(r[key], 2, dim=0)[index] for r in ranks], dim=0)

    return [("gate", lambda: part(0)), ("up", lambda: part(1))]
