"""The ``buffer`` section of the config schema: tasksets the explorer rolls out, the experience
buffer the trainer reads, their column formats and sampling settings. Fields and metadata as in
``rft_core.config.schema`` (which re-exports every class here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft_core.config.committed_names import registered_choices
from rft_core.config.meta import BEGINNER
from rft_core.config.meta import config_field as _field
from rft_core.config.trinity_sections import ReplayBufferConfig

# ---------------------------------------------------------------- buffer: tasksets and experiences


@dataclass
class FormatConfig:
    """How the columns of a dataset map onto prompts, answers and messages."""

    prompt_key: str = _field("prompt", "column holding the prompt (question)", level=BEGINNER)
    response_key: str = _field(
        "response",
        "column holding the reference answer (the truth rewards compare with)",
        level=BEGINNER,
    )
    system_prompt: str | None = _field(
        None, "system prompt for every task of this taskset (None: the workflow's default)"
    )
    system_prompt_key: str | None = _field(None, "column holding a per-row system prompt")
    prompt_type: str = _field(
        "auto",
        "SFT/DPO data layout: messages (a chat list in messages_key), plaintext (prompt_key/response_key), auto (messages when messages_key exists)",
        choices=["auto", "messages", "plaintext"],
    )
    messages_key: str = _field("messages", "column holding the chat messages list (SFT data)")
    chosen_key: str = _field("chosen", "column holding the preferred response (DPO data)")
    rejected_key: str = _field("rejected", "column holding the rejected response (DPO data)")
    workflow_key: str = _field("", "column naming a per-row workflow (empty: none)")
    reward_fn_key: str = _field("", "column naming a per-row reward function (empty: none)")
    chat_template: str | None = _field(
        None,
        "Jinja chat template for SFT/DPO data (None: model.custom_chat_template or the tokenizer's)",
    )
    enable_thinking: bool | None = _field(
        None,
        "passed to the chat template for models with a thinking switch (None: template default)",
    )
    tools_key: str = _field(
        "tools", "column holding the tools of a tool-call task", unimplemented=True
    )
    image_key: str | None = _field(
        None, "column holding images (multi-modal data)", unimplemented=True
    )
    video_key: str | None = _field(
        None, "column holding videos (multi-modal data)", unimplemented=True
    )
    reply_prefix: str | None = _field(
        None,
        "text every assistant reply starts with: the prompt ends with it (after the chat "
        "template's assistant header) and the model continues from there",
    )
    enable_concatenated_multi_turn: bool = _field(
        False,
        "multi-turn SFT: one sample per conversation, every assistant turn trained",
        unimplemented=True,
    )


@dataclass
class GenerationConfig:
    """Sampling settings of rollouts; unset values are derived from the `model` section."""

    temperature: float | None = _field(
        None,
        "sampling temperature (derived: model.temperature)",
        derived_from=["model.temperature"],
    )
    top_p: float | None = _field(
        None, "nucleus sampling (derived: model.top_p)", derived_from=["model.top_p"]
    )
    top_k: int | None = _field(
        None, "top-k sampling, -1 disables (derived: model.top_k)", derived_from=["model.top_k"]
    )
    max_tokens: int | None = _field(
        None,
        "max new tokens per response (derived: model.max_response_tokens)",
        derived_from=["model.max_response_tokens"],
    )
    n: int | None = _field(
        None,
        "rollouts per task (derived: algorithm.repeat_times, or the eval taskset's repeat_times)",
        derived_from=["algorithm.repeat_times"],
    )
    logprobs: int | None = _field(
        None,
        "top log-probs returned per token (derived: model.logprobs)",
        derived_from=["model.logprobs"],
    )


@dataclass
class DataSelectorConfig:
    """Order in which tasks are read."""

    selector_type: str = _field(
        "sequential",
        "sequential (file order), shuffle (a new permutation each epoch, from seed), random "
        "(each batch drawn afresh, from seed and position) or difficulty_based (tasks whose "
        "estimated pass rate is nearest kwargs.target_reward, from the feature_keys columns and "
        "the rewards seen)",
        choices=["sequential", "shuffle", "random", "difficulty_based"],
    )
    seed: int = _field(42, "seed of shuffle, random and difficulty_based")
    feature_keys: list[str] = _field(
        help="difficulty_based: the two columns holding each task's pass rate under a weak and a "
        "strong reference model",
        factory=list,
    )
    kwargs: dict[str, Any] = _field(
        help="difficulty_based: target_reward (1.0), tau (1.0; 0 = greedy), do_sample (false), "
        "m (16), lamb (0.2), rho (0.2), adaptive_rho (false)",
        factory=dict,
    )


@dataclass
class TasksetConfig:
    """A set of tasks (prompts with truths) that the explorer rolls out."""

    name: str = _field("", "taskset name; used in metric names (eval/<name>/...)", level=BEGINNER)
    storage_type: str = _field("file", "where the tasks live", choices=["file", "queue", "sql"])
    path: str | None = _field(
        None,
        "a dataset directory (as huggingface-cli/modelscope download leave it), a .jsonl/.json/.parquet file, or a dataset name in the offline HF cache",
        level=BEGINNER,
    )
    subset_name: str | None = _field(None, "dataset subset/config (a subdirectory, e.g. main)")
    split: str = _field("train", "split: file name prefix such as train-00000-of-00001.parquet")
    format: FormatConfig = _field(help="column mapping", factory=FormatConfig)
    rollout_args: GenerationConfig = _field(help="sampling settings", factory=GenerationConfig)
    repeat_times: int | None = _field(
        None,
        "eval tasksets: rollouts per task, the k of metrics @k (derived: rollout_args.n, else 1); training tasksets use algorithm.repeat_times",
        derived_from=[".rollout_args.n"],
    )
    default_workflow_type: str | None = _field(
        None,
        "workflow of the tasks (derived: explorer_input.default_workflow_type, else math_workflow)",
        derived_from=["buffer.explorer_input.default_workflow_type"],
    )
    default_reward_fn_type: str | None = _field(
        None,
        "reward function (derived: explorer_input.default_reward_fn_type, else the workflow's)",
        derived_from=["buffer.explorer_input.default_reward_fn_type"],
    )
    workflow_args: dict[str, Any] = _field(
        help="free-form arguments for the workflow", factory=dict
    )
    reward_fn_args: dict[str, Any] = _field(
        help="free-form arguments for the reward function", factory=dict
    )
    data_selector: DataSelectorConfig = _field(help="task order", factory=DataSelectorConfig)
    enable_progress_bar: bool = _field(
        False, "show a progress bar (per file) while reading the dataset"
    )
    index: int = _field(0, "start offset (tasks to skip); resume sets it from the checkpoint")
    task_selector: DataSelectorConfig | None = _field(
        None,
        "deprecated spelling of data_selector (read as data_selector, with a warning)",
        deprecated="data_selector",
    )
    max_retry_times: int = _field(3, "sql storage: retries of a failed read", unimplemented=True)
    max_retry_interval: int = _field(1, "sql storage: seconds between retries", unimplemented=True)


@dataclass
class ExperienceBufferConfig:
    """Where experiences go between explorer and trainer (or, in train mode, a dataset to train on)."""

    name: str = _field("experience_buffer", "buffer name")
    storage_type: str | None = _field(
        None,
        "queue (in-cluster, mirrored to path), file or sql (derived: file in train mode and for sft/dpo, else queue)",
        choices=registered_choices("storage_types"),
        derived_from=["mode", "algorithm.algorithm_type"],
    )
    path: str | None = _field(
        None,
        "queue mirror (sqlite:///x.db or .jsonl) / dataset path in train mode / database url for sql",
        level=BEGINNER,
    )
    subset_name: str | None = _field(None, "dataset subset (file storage)")
    split: str = _field("train", "dataset split (file storage)")
    format: FormatConfig = _field(
        help="column mapping of a dataset read in train mode", factory=FormatConfig
    )
    capacity: int = _field(10000, "queue capacity in experiences")
    max_read_timeout: float = _field(1800.0, "seconds the trainer waits for a batch before failing")
    enable_progress_bar: bool = _field(
        False, "show a progress bar (per file) while reading the dataset"
    )
    index: int = _field(0, "start offset of a dataset read in train mode")
    replay_buffer: ReplayBufferConfig | None = _field(
        help="priority replay of queue experiences", factory=ReplayBufferConfig
    )
    use_priority_queue: bool | None = _field(
        None, "older spelling of replay_buffer.enable (read as it, with a warning)"
    )
    reuse_cooldown_time: float | None = _field(
        None, "older spelling of replay_buffer.reuse_cooldown_time (read as it, with a warning)"
    )
    replay_buffer_kwargs: dict[str, Any] | None = _field(
        None,
        "older spelling of replay_buffer.priority_fn (key priority_fn) and priority_fn_args "
        "(the other keys), read as them with a warning",
    )
    max_retry_times: int = _field(3, "sql storage: retries of a failed read", unimplemented=True)
    max_retry_interval: int = _field(1, "sql storage: seconds between retries", unimplemented=True)
    data_selector: DataSelectorConfig = _field(
        help="order of a dataset read in train mode", factory=DataSelectorConfig, unimplemented=True
    )


@dataclass
class ExplorerInput:
    taskset: TasksetConfig | None = _field(
        None,
        "the training taskset (or use tasksets)",
        level=BEGINNER,
        beginner_keys=["path", "format.prompt_key", "format.response_key"],
    )
    tasksets: list[TasksetConfig] = _field(
        help="several training tasksets, read one after another (instead of taskset)", factory=list
    )
    eval_tasksets: list[TasksetConfig] = _field(
        help="tasksets evaluated every explorer.eval_interval steps",
        factory=list,
        level=BEGINNER,
        beginner_keys=["name", "path"],
    )
    default_workflow_type: str | None = _field(
        None, "workflow for tasksets that name none (derived: math_workflow)", derived_from=[]
    )
    default_eval_workflow_type: str | None = _field(
        None,
        "workflow for eval tasksets that name none (derived: default_workflow_type)",
        derived_from=[".default_workflow_type"],
    )
    default_reward_fn_type: str | None = _field(None, "reward function for tasksets that name none")
    system_prompt: str | None = _field(None, "system prompt for tasksets whose format gives none")
    reply_prefix: str | None = _field(
        None, "reply prefix for tasksets whose format gives none (format.reply_prefix)"
    )

    @property
    def all_tasksets(self) -> list[TasksetConfig]:
        """Every training taskset: ``taskset`` or the ``tasksets`` list."""
        return [self.taskset] if self.taskset is not None else list(self.tasksets)


@dataclass
class TrainerInput:
    experience_buffer: ExperienceBufferConfig | None = _field(
        None,
        "trainer input (derived in both/colocate: a queue named experience_buffer)",
        derived_from=["mode"],
    )
    auxiliary_buffers: dict[str, Any] = _field(
        help="extra buffers by name: mix / mix_chord read their expert SFT dataset from "
        "sft_dataset (algorithm.sample_strategy_args.sft_dataset_name); others: no effect (warned)",
        factory=dict,
    )


@dataclass
class BufferConfig:
    batch_size: int = _field(
        1, "tasks per explorer step (each rolled out repeat_times times)", level=BEGINNER
    )
    train_batch_size: int | None = _field(
        None,
        "experiences per trainer step (derived: batch_size x repeat_times; required for sft/dpo and train mode)",
        derived_from=[".batch_size", "algorithm.repeat_times"],
    )
    total_epochs: int = _field(1, "passes over the training taskset")
    total_steps: int | None = _field(
        None, "stop after this many steps (overrides total_epochs)", level=BEGINNER
    )
    explorer_input: ExplorerInput = _field(help="tasksets", factory=ExplorerInput)
    trainer_input: TrainerInput = _field(help="experience buffer", factory=TrainerInput)
    max_retry_times: int | None = _field(
        None,
        "old key (now on each taskset / experience_buffer): no effect, logs a warning",
        deprecated="max_retry_times of each taskset and experience_buffer",
    )
    max_retry_interval: int | None = _field(
        None,
        "old key (now on each taskset / experience_buffer): no effect, logs a warning",
        deprecated="max_retry_interval of each taskset and experience_buffer",
    )
