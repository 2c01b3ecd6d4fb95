"""Whether a job's GPUs can run its config, decided before any actor starts (pure functions of
the config and of numbers the caller measures, so every rule is tested on CPU with the numbers
given; the launcher passes the real ones):

- ``adapt_one_gpu``: mode ``both`` on a cluster of exactly one GPU runs as mode ``colocate``;
- ``cluster_gpu_problem``: the job asks for more GPUs than the cluster has (a local machine's
  ``torch.cuda.device_count()`` or a joined Ray cluster's ``GPU`` resource);
- ``engine_gpu_problem``: ``tensor_parallel_size`` larger than the GPUs an engine can have;
- ``weights_bytes`` / ``memory_fit_problem``: the rollout model's weights against one GPU's
  memory times ``gpu_memory_utilization`` (vLLM's share of each GPU); in mode ``colocate`` also
  that share beside what the trainer keeps on the same GPU while vLLM generates.

Why mode both on one GPU is adapted rather than refused: ``mode: both`` is Trinity-RFT's default
and the shape of every Trinity example, so a one-GPU user's config says it. On one GPU it cannot
run as written (the explorer and the trainer would each need a GPU of their own, and NCCL cannot
join two processes on one device), and there is exactly one way it can run: the explorer and
the trainer in one process (``rft_core.runtime.in_process``), which keeps the sync schedule, the
checkpoints, the evals and the monitor events of a two-actor run. Refusing would make every
such user write the same two edits; running it, with one warning line that says what changed
and how to silence it, is the same run they asked for. A config that cannot run colocated
either (several engines, tensor parallelism, several trainer ranks) is left to the checks that
name its key (``check_cluster``, ``check_world_size``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from rft_core.errors import ConfigError

if TYPE_CHECKING:
    from rft_core.config.schema import Config

log = logging.getLogger("rft_core.config")

GIB = 1024**3
BYTES_PER_DTYPE = {"float32": 4, "float16": 2, "bfloat16": 2}


# ---------------------------------------------------------------- mode both on one GPU


def one_gpu_change(cfg: Config) -> tuple[str, str] | None:
    """(mode, sync_method) a mode-``both`` config on a one-GPU cluster runs with instead, or
    None when it runs as written (or cannot run colocated either: the other checks say why).
    ``synchronizer.sync_method`` as written: unset or nccl -> memory; checkpoint is kept (it
    works in one process too)."""
    c, rm = cfg.cluster, cfg.explorer.rollout_model
    if cfg.mode != "both" or c.node_num * c.gpu_per_node != 1:
        return None
    if rm.engine_num != 1 or rm.tensor_parallel_size != 1:
        return None  # check_cluster names the key
    if cfg.trainer.world_size not in (None, 1):
        return None  # check_world_size names the key
    sync = cfg.synchronizer.sync_method
    return "colocate", ("checkpoint" if sync == "checkpoint" else "memory")


def adapt_one_gpu(cfg: Config) -> str | None:
    """Apply :func:`one_gpu_change` to ``cfg`` in place; returns the warning line it logged
    (None when nothing changed)."""
    change = one_gpu_change(cfg)
    if change is None:
        return None
    mode, sync = change
    was = cfg.synchronizer.sync_method
    sync_note = (
        f"synchronizer.sync_method {sync}"
        if was == sync
        else f"synchronizer.sync_method {was or 'unset'} -> {sync}"
    )
    message = (
        f"mode both needs a GPU for the explorer and one for the trainer, but the cluster has 1 "
        f"(cluster.node_num {cfg.cluster.node_num} x gpu_per_node {cfg.cluster.gpu_per_node}): "
        f"running mode colocate (explorer and trainer in one process), {sync_note}; "
        f"write mode: colocate and synchronizer.sync_method: {sync} to silence this"
    )
    cfg.mode, cfg.synchronizer.sync_method = mode, sync
    log.warning(message)
    return message


# ---------------------------------------------------------------- GPUs of the cluster


def cluster_gpu_problem(cfg: Config, have: float, where: str) -> tuple[str, str] | None:
    """(key, message) when the job's GPUs (``cluster.node_num x gpu_per_node``) exceed ``have``,
    the GPUs of ``where`` (e.g. "this machine", "the Ray cluster at head:6379"); else None."""
    c = cfg.cluster
    need = c.node_num * c.gpu_per_node
    if need <= have:
        return None
    key = "cluster.gpu_per_node" if c.node_num == 1 else "cluster.node_num"
    most = int(have) // max(c.node_num, 1)
    fix = (
        "set cluster.gpu_per_node: 0 to run on CPU"
        if most == 0
        else f"set cluster.gpu_per_node: {most} (or fewer)"
    )
    return (
        key,
        f"cluster.node_num {c.node_num} x gpu_per_node {c.gpu_per_node} = {need} GPU(s) "
        f"requested, but {where} has {have:g}; {fix}, or point RAY_ADDRESS at a cluster "
        "with more GPUs",
    )


def engine_gpu_problem(cfg: Config) -> tuple[str, str] | None:
    """(key, message) when ``tensor_parallel_size`` exceeds the GPUs one engine can hold: the
    GPUs of a node, less the trainer's in mode both (it keeps at least one), one in colocate
    (one actor on one GPU)."""
    c, rm = cfg.cluster, cfg.explorer.rollout_model
    if not c.gpu_per_node or cfg.mode in ("train",):
        return None
    tp, total = rm.tensor_parallel_size, c.node_num * c.gpu_per_node
    room, why = (
        c.gpu_per_node,
        f"an engine lives on one node (cluster.gpu_per_node {c.gpu_per_node})",
    )
    if cfg.mode == "colocate":
        room, why = 1, "mode colocate runs the engine and the trainer in one actor on one GPU"
    elif cfg.mode == "both" and total - 1 < room:
        room = total - 1
        why = f"mode both leaves the engines {room} of the cluster's {total} GPU(s), one is the trainer's"
    if tp <= room or room < 1:
        return None  # room 0: no GPU left for any engine, check_cluster names engine_num
    return (
        "explorer.rollout_model.tensor_parallel_size",
        f"{tp} GPUs per engine, but an engine can have {room}: {why}; set "
        f"tensor_parallel_size to at most {room} or add GPUs",
    )


# ---------------------------------------------------------------- the model against GPU memory


def parameter_count(hf_config: dict[str, Any]) -> int | None:
    """Parameters of a decoder-only transformer of the Llama / Qwen2 family from its
    ``config.json`` (embeddings, attention with grouped KV heads and Qwen2's q/k/v biases, a
    gated MLP, two norms a layer, the final norm, an untied LM head); None when a key it needs
    is missing (a shape it cannot read: no estimate, no check)."""
    try:
        h = int(hf_config["hidden_size"])
        layers = int(hf_config["num_hidden_layers"])
        inter = int(hf_config["intermediate_size"])
        vocab = int(hf_config["vocab_size"])
        heads = int(hf_config["num_attention_heads"])
    except (KeyError, TypeError, ValueError):
        return None
    kv_heads = int(hf_config.get("num_key_value_heads") or heads)
    head_dim = int(hf_config.get("head_dim") or h // heads)
    q, kv = heads * head_dim, kv_heads * head_dim
    attn = h * q + 2 * h * kv + q * h
    if hf_config.get("model_type") == "qwen2" or hf_config.get("attention_bias"):
        attn += q + 2 * kv
    layer = attn + 3 * h * inter + 2 * h
    embed = vocab * h
    head = 0 if hf_config.get("tie_word_embeddings", False) else vocab * h
    return embed + layers * layer + h + head


def weights_bytes(hf_config: dict[str, Any], dtype: str) -> int | None:
    """Bytes of the weights in ``dtype`` (``auto``: the config's ``torch_dtype``, bfloat16 when
    it has none, as on a GPU); None when the shape or the dtype is unknown."""
    params = parameter_count(hf_config)
    if dtype == "auto":
        dtype = str(hf_config.get("torch_dtype") or "bfloat16")
    size = BYTES_PER_DTYPE.get(dtype)
    return None if params is None or size is None else params * size


def memory_fit_problem(
    cfg: Config, hf_config: dict[str, Any], gpu_memory_bytes: int | None
) -> tuple[str, str] | None:
    """(key, message) when the vLLM engine's weights, split over ``tensor_parallel_size``
    GPUs, exceed ``gpu_memory_bytes x gpu_memory_utilization`` (vLLM's share of each GPU; the KV
    cache needs room beyond the weights, so passing this is necessary, not sufficient). None
    when GPU memory is unknown (a Ray cluster's), the engine is not vLLM (the only engine that
    reads the fraction) or the model's shape is not one :func:`parameter_count` reads."""
    rm = cfg.explorer.rollout_model
    if not gpu_memory_bytes or rm.engine_type != "vllm" or cfg.mode in ("train",):
        return None
    total = weights_bytes(hf_config, rm.dtype)
    if total is None:
        return None
    per_gpu = total / rm.tensor_parallel_size
    share = gpu_memory_bytes * rm.gpu_memory_utilization
    if per_gpu <= share:
        return None
    least = per_gpu / gpu_memory_bytes
    params = parameter_count(hf_config) or 0
    return (
        "explorer.rollout_model.gpu_memory_utilization",
        f"{rm.gpu_memory_utilization:g} of a {gpu_memory_bytes / GIB:.1f} GiB GPU is "
        f"{share / GIB:.2f} GiB, but the model's weights alone take {per_gpu / GIB:.2f} GiB per "
        f"GPU ({params / 1e9:.2f}B parameters x {total // params if params else 0} bytes / "
        f"tensor_parallel_size {rm.tensor_parallel_size}); raise gpu_memory_utilization well "
        f"above {least:.2f} (the KV cache needs room too), raise tensor_parallel_size, or use "
        "a smaller model",
    )


# what the trainer keeps on the GPU per parameter while a colocated vLLM generates: fp32 master
# weights (4 bytes) and, unless trainer.optimizer_offload, Adam's two fp32 moments (8); a lower
# bound (the bf16 working copy and the step's activations come on top)
TRAINER_RESIDENT_BYTES = 4
ADAM_MOMENT_BYTES = 8


def colocate_memory_problem(
    cfg: Config, hf_config: dict[str, Any], gpu_memory_bytes: int | None
) -> tuple[str, str] | None:
    """(key, message) when, in mode ``colocate``, vLLM's share of the GPU
    (``gpu_memory_utilization``) and what the trainer keeps there while vLLM generates do not
    fit the one GPU together: vLLM would stop at start-up ("free memory ... is less than desired
    GPU memory utilization") or at its first wake-up after a trainer step. None when it fits,
    when GPU memory is unknown or the engine is not vLLM."""
    rm = cfg.explorer.rollout_model
    if not gpu_memory_bytes or rm.engine_type != "vllm" or cfg.mode != "colocate":
        return None
    params = parameter_count(hf_config)
    if not params:
        return None
    offload = bool(getattr(cfg.trainer, "optimizer_offload", False))
    per_param = TRAINER_RESIDENT_BYTES + (0 if offload else ADAM_MOMENT_BYTES)
    trainer = params * per_param
    share = gpu_memory_bytes * rm.gpu_memory_utilization
    if share + trainer <= gpu_memory_bytes:
        return None
    most = max(0.0, (gpu_memory_bytes - trainer) / gpu_memory_bytes)
    what = "fp32 master weights" + ("" if offload else " and Adam's two moments")
    return (
        "explorer.rollout_model.gpu_memory_utilization",
        f"{rm.gpu_memory_utilization:g} of a {gpu_memory_bytes / GIB:.1f} GiB GPU is "
        f"{share / GIB:.2f} GiB for vLLM, but in mode colocate the trainer keeps at least "
        f"{trainer / GIB:.2f} GiB on the same GPU while vLLM generates ({params / 1e9:.2f}B "
        f"parameters x {per_param} bytes: {what}); set gpu_memory_utilization below "
        f"{most:.2f} (examples/gpu/grpo_synthetic_1p5b.yaml uses 0.35 for 1.5B)"
        + ("" if offload else " or trainer.optimizer_offload: true"),
    )


def raise_first(*problems: tuple[str, str] | None) -> None:
    """Raise the first problem as a ConfigError (one line naming its key)."""
    for problem in problems:
        if problem is not None:
            raise ConfigError(*problem)
