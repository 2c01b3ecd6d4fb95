"""The corpus of other users' Trinity-RFT configs (``trinity_configs/``, each naming its source
repository, path and commit on its first line) and what each is expected to do: load, or be
refused at one YAML path with one message. ``config/test_trinity_configs.py`` checks the loader
against it; ``runtime/test_trinity_config_runs.py`` runs the accepted ones; docs/trinity_examples.md
is its table for readers."""

from __future__ import annotations

import re
from pathlib import Path

CORPUS = Path(__file__).parent / "trinity_configs"
FILES = sorted(CORPUS.glob("*.yaml"))
SOURCE = re.compile(r"^# source: [\w.-]+/Trinity-RFT examples/\S+\.yaml @ [0-9a-f]{40}$")

# stem -> None (loads and its workflows/rewards are registered) or (YAML path, text of the error)
EXPECTED: dict[str, tuple[str, str] | None] = {
    "grpo_gsm8k": None,
    "grpo_lora_gsm8k": None,
    "grpo_gsm8k_task_pipeline": None,
    "rloo_gsm8k": None,
    "reinforceplusplus_gsm8k": None,
    "dpo_humanlike": None,
    "async_gsm8k_explorer": None,
    "mix_chord": None,
    "grpo_frozen_lake": None,
    "opmd_gsm8k": None,
    "gspo_gsm8k": None,
    # workflows and reward functions we do not have: the error lists the registered ones
    # environments whose simulator is a package of its own: refused naming the package
    "grpo_alfworld": (
        "buffer.explorer_input.taskset.default_workflow_type",
        "workflow 'alfworld_workflow' needs the 'alfworld' package (its simulator), which is "
        "not installed",
    ),
    "grpo_toolcall": None,  # toolcall_workflow reads ToolACE's own columns (tools, answer, ...)
    # math_rm_workflow is here; its OpenJudge reward calls an outside judge API
    "grpo_gsm8k_openjudge": (
        "buffer.explorer_input.taskset.default_reward_fn_type",
        "'trajectory_accuracy_grader_reward' needs an outside OpenAI-compatible judge API",
    ),
    "ppo_countdown": None,
    # agent workflows (rft_core/workflows/react_math.py on the OpenAI endpoint) with
    # multi_step_grpo, add_strategy and use_priority_queue read; agents whose tools are a
    # service outside the job are refused naming it
    "agentscope_react_gsm8k": None,
    "agentscope_tool_react_gsm8k": None,
    "agentscope_websearch": (
        "buffer.explorer_input.taskset.default_workflow_type",
        "needs a web search API (Tavily or SearXNG",
    ),
    "grpo_email_search": (
        "buffer.explorer_input.taskset.default_workflow_type",
        "needs the Enron e-mail corpus database",
    ),
    # deliberate differences (TRINITY_COMPAT.md: train_batch_size is required for sft and train mode)
    "sft_mot": ("buffer.train_batch_size", "required with algorithm_type sft"),
    "async_gsm8k_trainer": ("buffer.train_batch_size", "required with mode train"),
    # images: the engines and trainer are text-only (its token budget below max_model_len is
    # a warning: a longer sequence trains alone in its micro-batch)
    "grpo_vlm": (
        "buffer.explorer_input.taskset.default_workflow_type",
        "workflow 'simple_mm_workflow' (Trinity-RFT's multimodal prompts with images",
    ),
    # keys Trinity-RFT 0.6 rejects as well: the error says what to write instead
    "dapo_math": ("buffer.explorer_input.taskset.subset", "did you mean 'subset_name'?"),
    "grpo_math_top_level_algorithm_type": ("algorithm_type", "moved to algorithm.algorithm_type"),
    "grpo_gsm8k_v0.1_data_section": ("data", "buffer.explorer_input.taskset"),
    # memory sync in mode both (through the object store); Tinker itself is warned about
    "tinker": None,
    # replay_buffer: Trinity's priority queue with reuse (rft_core.buffer.replay)
    "ppo_countdown_exp_replay": None,
    # older keys (Trinity <= 0.2): data_processor_url is an outside service, refused with why
    "grpo_gsm8k_task_pipeline_v0.2_data_processor_url": (
        "data_processor.data_processor_url",
        "an outside data-processor service",
    ),
    # add_strategy step_wise_grpo is read as algorithm_type multi_step_grpo (and its
    # use_priority_queue as replay_buffer.enable)
    "agentscope_tool_react_add_strategy": None,
}

# the configs that load (their workflows and rewards registered)
ACCEPTED = [f for f in FILES if EXPECTED[f.stem] is None]
