"""The config schema: one dataclass per Trinity-RFT section, with Trinity's field names (the
``buffer`` section's classes are in ``buffer_schema.py``, the rollout engines' in
``rollout_schema.py``, re-exported here).

Every field carries its metadata once, beside its default (``field(metadata=...)``):

- ``help``: one line shown in the reference YAML, the JSON schema and the web forms;
- ``choices``: allowed values of an enum-like string (matched case-insensitively);
- ``aliases``: other spellings users write (``sync_method: online`` means ``nccl``);
- ``level``: ``beginner`` (shown in the simple web form) or ``expert``;
- ``unimplemented``: accepted so that Trinity-RFT users' configs load, not acted on; a
  non-default value logs a warning (``rft_core.config.trinity_compat``).

A field declared with ``derived_from`` (default ``None``) is "decided by the validator from the
rest of the config" (``rft_core.config.validate``); after ``load_config`` those fields hold
concrete values. ``show_when``, ``deprecated`` and ``level`` are the other keys the forms read
(``rft_core.config.meta``); help texts are shown, never parsed. Free-form dicts (``*_args``, ``trainer_config``, ``monitor_args``,
``extra_engine_args``) accept any keys; everywhere else an unknown key is an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rft_core.config.buffer_schema import BufferConfig, TasksetConfig
from rft_core.config.buffer_schema import DataSelectorConfig as DataSelectorConfig  # re-exported
from rft_core.config.buffer_schema import ExperienceBufferConfig as ExperienceBufferConfig
from rft_core.config.buffer_schema import ExplorerInput as ExplorerInput
from rft_core.config.buffer_schema import FormatConfig as FormatConfig
from rft_core.config.buffer_schema import GenerationConfig as GenerationConfig
from rft_core.config.buffer_schema import TrainerInput as TrainerInput
from rft_core.config.committed_names import registered_choices
from rft_core.config.meta import BEGINNER
from rft_core.config.meta import config_field as _field
from rft_core.config.presets import PRESETS, refused_algorithms
from rft_core.config.rollout_schema import AuxiliaryModelConfig as AuxiliaryModelConfig
from rft_core.config.rollout_schema import RolloutModelConfig as RolloutModelConfig
from rft_core.config.trinity_sections import (
    DataProcessorConfig,
    DynamicTimeoutConfig,
    ExternalModelConfig,
    LogConfig,
    LoRAConfig,
    MegatronParallelConfig,
    OverRolloutConfig,
    ServiceConfig,
    TinkerConfig,
)
from rft_core.dtypes import AUTO, SHORT_ALIASES, WEIGHT_DTYPES

MODES = ["both", "explore", "train", "bench", "serve", "colocate"]
LR_SCHEDULES = ["constant", "cosine", "linear"]  # also what the deprecated warmup_style may say
ALGORITHM_TYPES = list(PRESETS)
LOSS_AGG_MODES = [
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
]


# ---------------------------------------------------------------- algorithm


@dataclass
class OptimizerConfig:
    lr: float = _field(1e-6, "learning rate", level=BEGINNER)
    lr_warmup_steps: int = _field(-1, "linear warmup steps (-1: use lr_warmup_steps_ratio)")
    lr_warmup_steps_ratio: float = _field(0.0, "warmup as a fraction of total steps")
    lr_scheduler_type: str = _field(
        "constant", "learning-rate schedule after warmup", choices=LR_SCHEDULES
    )
    min_lr_ratio: float = _field(0.0, "final lr / lr for cosine and linear schedules")
    optimizer_type: str = _field(
        "adamw", "optimizer", choices=["adamw", "adam", "sgd"], aliases={"AdamW": "adamw"}
    )
    betas: list[float] = _field(help="Adam betas", factory=lambda: [0.9, 0.999])
    weight_decay: float = _field(0.01, "weight decay")
    clip_grad: float = _field(1.0, "gradient norm clip (trainer.grad_clip overrides it when set)")
    warmup_style: str | None = _field(
        None,
        "deprecated spelling of lr_scheduler_type (read as it, with a warning)",
        deprecated="lr_scheduler_type",
    )


@dataclass
class AlgorithmConfig:
    algorithm_type: str = _field(
        "grpo",
        "algorithm preset; it picks the functions below when they are unset",
        choices=ALGORITHM_TYPES,
        refused=refused_algorithms(),
        level=BEGINNER,
    )
    repeat_times: int | None = _field(
        None,
        "rollouts per task (the group size); derived from algorithm_type: "
        + ", ".join(f"{k} {p.repeat_times}" for k, p in PRESETS.items()),
        level=BEGINNER,
        derived_from=["algorithm.algorithm_type"],
    )
    optimizer: OptimizerConfig = _field(help="optimizer and LR schedule", factory=OptimizerConfig)
    sample_strategy: str | None = _field(
        None, "how the trainer samples experiences (None: in order)"
    )
    sample_strategy_args: dict[str, Any] = _field(
        help="mix / mix_chord: expert_data_ratio (0.5), sft_dataset_name (sft_dataset); "
        "other keys and other algorithms: no effect (warned)",
        factory=dict,
    )
    add_strategy: str | None = _field(
        None,
        "older Trinity-RFT spelling (<= 0.2): step_wise_grpo is read as algorithm_type "
        "multi_step_grpo, grpo / opmd as that advantage_fn (with a warning)",
    )
    add_strategy_args: dict[str, Any] | None = _field(
        None, "older spelling of the advantage_fn_args of add_strategy"
    )
    advantage_fn: str | None = _field(
        None,
        "advantage function: grpo, rloo, reinforceplusplus, ppo/gae, opmd, asymre, rec, reinforce, "
        "step_wise_grpo, gigpo, raft, clipb (derived from algorithm_type)",
        derived_from=["algorithm.algorithm_type"],
    )
    advantage_fn_args: dict[str, Any] = _field(
        help="free-form: std_threshold (drops groups whose reward std is <= it: DAPO's dynamic "
        "sampling), std_cal_level (grpo); gamma, lam (ppo); opmd_baseline, tau (opmd); "
        "baseline_shift (asymre); std_normalize, drop (rec); enable_step_norm (step_wise_grpo); "
        "omega, gamma, fnorm (gigpo); reward_threshold (raft); mu (clipb)",
        factory=dict,
    )
    policy_loss_fn: str | None = _field(
        None,
        "policy loss (derived from algorithm_type): ppo, sft, dpo, opmd, gspo, cispo, topr, sppo, "
        "rec, sapo, m2po",
        derived_from=["algorithm.algorithm_type"],
    )
    policy_loss_fn_args: dict[str, Any] = _field(
        help="free-form: clip_range, clip_range_low, clip_range_high (ppo, gspo, cispo; DAPO's "
        "decoupled clip is ppo's clip_range_high 0.28), clip_ratio_c (ppo); beta (dpo); tau "
        "(opmd); epsilon (sppo); advantage_threshold (topr); clip_mode, weight (rec); tau_pos, "
        "tau_neg (sapo); m2_threshold, log_ratio_clip (m2po)",
        factory=dict,
    )
    kl_loss_fn: str | None = _field(
        None,
        "KL(policy, reference) added to the loss (derived: k2 for grpo, none for sft)",
        choices=registered_choices("kl_fns"),
        derived_from=["algorithm.algorithm_type"],
    )
    kl_loss_fn_args: dict[str, Any] = _field(help="free-form: kl_coef", factory=dict)
    kl_penalty_fn: str | None = _field(
        None,
        "KL subtracted from the reward (derived: none)",
        choices=registered_choices("kl_fns"),
        derived_from=["algorithm.algorithm_type"],
    )
    kl_penalty_fn_args: dict[str, Any] = _field(help="free-form: kl_coef", factory=dict)
    entropy_loss_fn: str | None = _field(
        None,
        "entropy term (derived: default); mix (Trinity's for mix/mix_chord): over the rollout "
        "rows only, as default already is for those algorithms",
        choices=["default", "none", "mix"],
        derived_from=["algorithm.algorithm_type"],
    )
    entropy_loss_fn_args: dict[str, Any] = _field(help="free-form: entropy_coef", factory=dict)
    loss_agg_mode: str | None = _field(
        None,
        "how token losses are averaged (derived from algorithm_type: token-mean)",
        choices=LOSS_AGG_MODES,
        derived_from=["algorithm.algorithm_type"],
    )
    enable_router_replay: bool = _field(
        False, "MoE models: replay the rollout's expert routing", unimplemented=True
    )
    bypass_old_logprobs: bool = _field(
        True,
        "old log-probs are the rollout engine's (False: recomputed by the trainer)",
        unimplemented=True,
    )
    rollout_correction: dict[str, Any] | None = _field(
        None, "off-policy correction (importance weights, rejection sampling)", unimplemented=True
    )


# ---------------------------------------------------------------- model, cluster


@dataclass
class ModelConfig:
    model_path: str = _field(
        "",
        "Hugging Face model directory or hub name in the offline cache (required)",
        level=BEGINNER,
    )
    critic_model_path: str = _field(
        "",
        "critic model for ppo (empty: model_path)",
        show_when={"algorithm.algorithm_type": ["ppo"]},
    )
    max_model_len: int | None = _field(
        None,
        "prompt + response tokens (derived from the other two lengths when unset: any two of "
        "the three determine the third)",
        derived_from=[".max_prompt_tokens", ".max_response_tokens"],
    )
    max_prompt_tokens: int | None = _field(
        None,
        "longest prompt; longer prompts keep their last tokens (derived: max_model_len - "
        "max_response_tokens)",
        derived_from=[".max_model_len", ".max_response_tokens"],
    )
    max_response_tokens: int | None = _field(
        None,
        "longest response (derived: max_model_len - max_prompt_tokens)",
        level=BEGINNER,
        derived_from=[".max_model_len", ".max_prompt_tokens"],
    )
    temperature: float = _field(1.0, "rollout sampling temperature")
    top_p: float = _field(1.0, "rollout nucleus sampling")
    top_k: int = _field(-1, "rollout top-k sampling (-1: off)")
    logprobs: int = _field(0, "top log-probs returned per token besides the sampled one")
    custom_chat_template: str | None = _field(None, "Jinja chat template replacing the tokenizer's")
    chat_template_path: str | None = _field(
        None, "file holding a chat template (overrides custom_chat_template)"
    )
    enable_thinking: bool | None = _field(None, "thinking switch passed to the chat template")
    trust_remote_code: bool = _field(False, "allow model code from the model directory")
    dtype: str = _field(
        "auto",
        "trainer weights dtype (auto: bfloat16 on GPU, float32 on CPU)",
        choices=[AUTO, *WEIGHT_DTYPES],
        aliases=SHORT_ALIASES,
    )
    min_response_tokens: int = _field(0, "shortest response", unimplemented=True)
    enable_prompt_truncation: bool = _field(
        True, "truncate prompts to max_prompt_tokens (RFT Studio always does)", unimplemented=True
    )
    repetition_penalty: float = _field(1.0, "rollout repetition penalty", unimplemented=True)
    lora_configs: list[LoRAConfig] | None = _field(
        None, "LoRA adapters of the rollout model", unimplemented=True
    )
    fully_sharded_loras: bool = _field(False, "vLLM: shard LoRA computation", unimplemented=True)
    max_cpu_loras: int | None = _field(
        None, "vLLM: LoRA adapters kept in CPU memory", unimplemented=True
    )
    rope_scaling: dict[str, Any] | None = _field(None, "RoPE scaling override", unimplemented=True)
    rope_theta: float | None = _field(None, "RoPE theta override", unimplemented=True)
    tinker: TinkerConfig = _field(
        help="training through the Tinker service", factory=TinkerConfig, unimplemented=True
    )
    external_model: ExternalModelConfig = _field(
        help="rollouts from an OpenAI-compatible API",
        factory=ExternalModelConfig,
        unimplemented=True,
    )


@dataclass
class ClusterConfig:
    node_num: int = _field(1, "nodes of this job")
    gpu_per_node: int = _field(0, "GPUs per node of this job (0: CPU only)", level=BEGINNER)
    ray_address: str | None = _field(
        None,
        "Ray cluster to join (None: $RAY_ADDRESS, else start a local Ray; 'auto': an existing local cluster)",
    )


# ---------------------------------------------------------------- explorer, synchronizer, trainer, monitor


@dataclass
class ExplorerConfig:
    name: str = _field("explorer", "actor name")
    runner_per_model: int = _field(8, "concurrent workflow runners per rollout engine")
    max_timeout: int = _field(1800, "seconds a task may run before it is retried")
    max_retry_times: int = _field(2, "retries of a failed task")
    eval_interval: int = _field(100, "evaluate every N explorer steps", level=BEGINNER)
    eval_on_startup: bool = _field(True, "evaluate at step 0")
    bench_on_latest_checkpoint: bool = _field(False, "bench mode: only the latest checkpoint")
    rollout_model: RolloutModelConfig = _field(help="rollout engines", factory=RolloutModelConfig)
    runner_num: int | None = _field(
        None,
        "deprecated in Trinity-RFT: no effect, logs a warning (use runner_per_model)",
        deprecated="runner_per_model",
    )
    runner_prepare_concurrency: int = _field(
        128, "concurrent runner preparations", unimplemented=True
    )
    runner_prepare_max_retries: int = _field(
        3, "retries of a failed runner preparation", unimplemented=True
    )
    env_vars: dict[str, Any] = _field(
        help="environment variables of workflow runners", factory=dict, unimplemented=True
    )
    concurrent_mode: str = _field(
        "sequential",
        "how a runner runs a group: sequential, asynchronous, multi-threading",
        unimplemented=True,
    )
    max_repeat_times_per_runner: int | None = _field(
        None, "runs of one task per runner", unimplemented=True
    )
    auxiliary_models: list[AuxiliaryModelConfig] = _field(
        help="extra models workflows query (math_rm_workflow's judge): one engine each, beside the policy's",
        factory=list,
    )
    proxy_port: int = _field(8010, "serve mode: proxy port", unimplemented=True)
    listen_address: str = _field("0.0.0.0", "serve mode: listen address", unimplemented=True)
    service_status_check_interval: int = _field(
        60, "serve mode: seconds between checks", unimplemented=True
    )
    min_running_model_num: int = _field(1, "serve mode: models kept running", unimplemented=True)
    db_url: str | None = _field(None, "serve mode: history database", unimplemented=True)
    over_rollout: OverRolloutConfig = _field(
        help="over-rollout", factory=OverRolloutConfig, unimplemented=True
    )
    dynamic_timeout: DynamicTimeoutConfig = _field(
        help="per-step timeout from task times", factory=DynamicTimeoutConfig, unimplemented=True
    )
    runner_state_report_interval: int = _field(
        0, "seconds between runner reports (0: off)", unimplemented=True
    )
    max_inflight_batches: int = _field(
        2, "train batches held by the rollout coordinator", unimplemented=True
    )


@dataclass
class SynchronizerConfig:
    sync_method: str | None = _field(
        None,
        "how weights reach the explorer (derived: nccl in both, memory in colocate, else checkpoint)",
        choices=["nccl", "checkpoint", "memory"],
        aliases={"online": "nccl", "offline": "checkpoint"},
        derived_from=["mode"],
    )
    sync_style: str = _field(
        "fixed",
        "fixed: every sync_interval steps; explorer_driven/trainer_driven: when that side asks",
        choices=["fixed", "explorer_driven", "trainer_driven"],
        aliases={"dynamic_by_explorer": "explorer_driven", "dynamic_by_trainer": "trainer_driven"},
    )
    sync_interval: int = _field(1, "sync every N steps (1: on-policy)")
    sync_offset: int = _field(0, "explorer steps run before the first sync")
    sync_timeout: int = _field(3600, "seconds to wait for a sync")
    explorer_sync_interval: int | None = _field(
        None, "explorer's own sync_interval", unimplemented=True
    )
    trainer_sync_interval: int | None = _field(
        None, "trainer's own sync_interval", unimplemented=True
    )
    group_name: str = _field("rollout_weight_sync", "NCCL process group name", unimplemented=True)
    wait_for_checkpoint: bool = _field(False, "wait for the latest checkpoint", unimplemented=True)


@dataclass
class TrainerConfig:
    name: str = _field("trainer", "actor name")
    trainer_strategy: str = _field(
        "fsdp2", "sharding of the trainer on GPUs", choices=["fsdp", "fsdp2", "megatron"]
    )
    save_interval: int = _field(
        0, "checkpoint every N trainer steps (0: only at the end)", level=BEGINNER
    )
    save_hf_checkpoint: str = _field(
        "last", "write actor/huggingface weights", choices=["last", "always", "never"]
    )
    grad_clip: float | None = _field(
        None,
        "gradient norm clip (derived: algorithm.optimizer.clip_grad)",
        derived_from=["algorithm.optimizer.clip_grad"],
    )
    actor_grad_clip: float | None = _field(
        None, "older Trinity-RFT spelling (<= 0.3) of grad_clip (read as it, with a warning)"
    )
    sft_eval_interval: int | None = _field(
        None,
        "mode train without rollouts (SFT, DPO): evaluate on buffer.explorer_input.eval_tasksets "
        "every N trainer steps and after the last, with the trainer's weights (and at step 0 "
        "with explorer.eval_on_startup); None: explorer.eval_interval, widened to at most 3 "
        "evals over the stage; 0: never",
    )
    max_checkpoints_to_keep: int = _field(
        0,
        "keep the newest N full checkpoints of each stage, delete older global_step_* dirs "
        "(0: keep all; the resume step and the best_checkpoint_metric step are always kept)",
    )
    best_checkpoint_metric: str = _field(
        "",
        "also keep the checkpoint with the best value of this metric, e.g. "
        "eval/<taskset>/accuracy/mean@1 (empty: none)",
    )
    best_checkpoint_mode: str = _field(
        "max",
        "whether the best value of best_checkpoint_metric is the max or the min",
        choices=["max", "min"],
    )
    max_token_len_per_gpu: int | None = _field(
        None,
        "tokens per micro-batch per GPU (derived: 2 x model.max_model_len)",
        derived_from=["model.max_model_len"],
    )
    micro_batch_size_per_gpu: int | None = _field(
        None, "sequences per micro-batch (None: split by max_token_len_per_gpu)"
    )
    world_size: int | None = _field(
        None,
        "data-parallel trainer ranks, FSDP2-sharded (None: one per trainer GPU, 1 on CPU); "
        "on CPU several ranks train over gloo",
    )
    gradient_checkpointing: bool = _field(False, "recompute activations to save memory")
    ppo_epochs: int = _field(
        1, "optimizer steps over each trainer step's batch (verl's actor.ppo_epochs)"
    )
    total_steps: int | None = _field(
        None, "stop training after this trainer step (None: end of data)"
    )
    trainer_config: dict[str, Any] = _field(help="free-form backend overrides", factory=dict)
    ppo_max_token_len_per_gpu: int | None = _field(
        None,
        "old name of max_token_len_per_gpu (read as it, with a warning)",
        deprecated="max_token_len_per_gpu",
    )
    trainer_type: str = _field(
        "verl", "Trinity's trainer backend (RFT Studio has its own)", unimplemented=True
    )
    trainer_config_path: str = _field(
        "",
        "verl config file (deprecated in Trinity-RFT; use trainer_config)",
        unimplemented=True,
        deprecated="trainer_config",
    )
    enable_preview: bool = _field(True, "rollout preview in wandb", unimplemented=True)
    use_dynamic_bsz: bool = _field(
        True,
        "micro-batches by token count (RFT Studio always packs by max_token_len_per_gpu)",
        unimplemented=True,
    )
    use_remove_padding: bool | None = _field(
        None,
        "padding-free micro-batches: each micro-batch's rows packed into one sequence, attention "
        "kept within each row (None: off; the padded forward measured faster on CPU and as fast "
        "on an H200: benchmarks/RESULTS.md)",
    )
    use_torch_compile: bool | None = _field(
        None,
        "fuse the decoder layers' element-wise work (RMSNorm, SwiGLU) with torch.compile "
        "(None: on a CUDA trainer, off on CPU; benchmarks/RESULTS.md)",
    )
    balance_batch: bool = _field(
        True, "balance tokens across data-parallel ranks", unimplemented=True
    )
    critic_warmup: int = _field(0, "steps that update only the critic", unimplemented=True)
    ulysses_sequence_parallel_size: int = _field(1, "sequence parallel size", unimplemented=True)
    fix_actor_microbatch_loss_scale: bool = _field(
        False, "micro-batch loss scale fix", unimplemented=True
    )
    param_offload: bool = _field(False, "offload parameters to CPU", unimplemented=True)
    optimizer_offload: bool = _field(
        False,
        "mode colocate: keep the optimizer state on the CPU while the rollout engine generates",
    )
    grad_offload: bool = _field(False, "offload gradients to CPU", unimplemented=True)
    offload_policy: bool = _field(False, "FSDP2 offload policy", unimplemented=True)
    save_strategy: str = _field(
        "unrestricted", "concurrency of checkpoint saving", unimplemented=True
    )
    megatron: MegatronParallelConfig = _field(
        help="Megatron parallelism", factory=MegatronParallelConfig, unimplemented=True
    )


@dataclass
class MonitorConfig:
    monitor_type: str = _field(
        "tensorboard",
        "metrics sink besides the JSONL file (wandb/mlflow when installed)",
        choices=registered_choices("monitor_types"),
    )
    monitor_args: dict[str, Any] = _field(help="free-form arguments for the sink", factory=dict)
    detailed_stats: bool = _field(False, "also log std of eval metrics")
    rollout_samples_per_step: int = _field(
        16,
        "rollouts of each kept explorer step written to monitor/explorer_samples.jsonl and the "
        "dashboard's rollout explorer: whole task groups in task order (0: none); DPO: the "
        "first preference pairs of each kept trainer step, two rows a pair",
    )
    rollout_samples_interval: int = _field(
        1,
        "keep the rollouts of explorer steps 1, 1+N, 1+2N, ... (DPO: trainer steps; 1: every "
        "step; a larger N bounds the disk they take on long runs)",
    )
    rollout_token_logprobs: bool = _field(
        True,
        "with each kept rollout, its response tokens and their log-probs, the rollout engine's "
        "and the trainer's (the rollout explorer's token view; about 20 bytes a token)",
    )
    system_metrics_interval: float = _field(
        10.0,
        "seconds between system/* metrics (CPU, memory; GPU utilisation and memory where NVML "
        "sees a GPU) of each actor (0: off)",
    )
    enable_ray_timeline: bool = _field(False, "write a Ray timeline profile", unimplemented=True)


# ---------------------------------------------------------------- stages and the root


@dataclass
class StageConfig:
    """One stage of a multi-stage run: a section given here replaces the global one."""

    stage_name: str = _field(
        "", "stage name; the stage's job dir is <name>/<stage_name>", level=BEGINNER
    )
    mode: str | None = _field(
        None, "mode of this stage (None: the global mode)", choices=MODES, level=BEGINNER
    )
    algorithm: AlgorithmConfig | None = _field(None, "replaces the global algorithm section")
    buffer: BufferConfig | None = _field(None, "replaces the global buffer section")
    explorer: ExplorerConfig | None = _field(None, "replaces the global explorer section")
    synchronizer: SynchronizerConfig | None = _field(
        None, "replaces the global synchronizer section"
    )
    trainer: TrainerConfig | None = _field(None, "replaces the global trainer section")
    data_processor: DataProcessorConfig | None = _field(
        None, "replaces the global data_processor section", unimplemented=True
    )


@dataclass
class Config:
    mode: str = _field(
        "both",
        "both: explorer and trainer in turn; explore/train: one side; bench: evaluate checkpoints; serve: rollout server; colocate: both on one GPU",
        choices=MODES,
        level=BEGINNER,
    )
    project: str = _field("Trinity-RFT", "project name (a directory level of the job dir)")
    group: str = _field("", "optional group (a directory level between project and name when set)")
    name: str = _field("rft", "experiment name (the job dir's last level)")
    checkpoint_root_dir: str = _field("./checkpoints", "root of job dirs: <root>/<project>/<name>")
    continue_from_checkpoint: bool = _field(
        True, "resume from the latest checkpoint in the job dir"
    )
    stage_name: str | None = _field(None, "set by resolve_stages on each stage's config")
    ray_namespace: str = _field(
        "", "Ray namespace of the job (empty: derived from the job)", unimplemented=True
    )
    ignore_validator_suggestions: bool = _field(
        False, "skip GPU-memory suggestions", unimplemented=True
    )
    data_processor: DataProcessorConfig = _field(
        help="task and experience pipelines (Data-Juicer)",
        factory=DataProcessorConfig,
        unimplemented=True,
    )
    service: ServiceConfig = _field(
        help="outside services", factory=ServiceConfig, unimplemented=True
    )
    log: LogConfig = _field(help="the run's log on stderr", factory=LogConfig)
    algorithm: AlgorithmConfig = _field(help="algorithm", factory=AlgorithmConfig)
    model: ModelConfig = _field(help="model", factory=ModelConfig)
    cluster: ClusterConfig = _field(help="cluster", factory=ClusterConfig)
    buffer: BufferConfig = _field(help="data", factory=BufferConfig)
    explorer: ExplorerConfig = _field(help="explorer", factory=ExplorerConfig)
    synchronizer: SynchronizerConfig = _field(help="synchronizer", factory=SynchronizerConfig)
    trainer: TrainerConfig = _field(help="trainer", factory=TrainerConfig)
    monitor: MonitorConfig = _field(help="monitor", factory=MonitorConfig)
    stages: list[StageConfig] = _field(
        help="stages run in order (e.g. sft_warmup then rft); empty: one stage",
        factory=list,
        level=BEGINNER,
    )

    @property
    def job_dir(self) -> Path:
        """``checkpoint_root_dir/project[/group]/name[/stage_name]`` (the seed's layout)."""
        parts = [self.project, self.group, self.name, self.stage_name or ""]
        return Path(self.checkpoint_root_dir).joinpath(*[p for p in parts if p])

    @property
    def tasksets(self) -> list[TasksetConfig]:
        """Every training taskset (``taskset`` or ``tasksets``)."""
        return self.buffer.explorer_input.all_tasksets


def job_dir(cfg: Config) -> Path:
    return cfg.job_dir
