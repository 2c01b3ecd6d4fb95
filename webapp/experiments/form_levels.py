"""Which fields of the experiment form a beginner sees: the few that running GRPO on one's own
model and data needs (issue 23: the beginner form had 49 fields over 5,500 px). Every other
field is behind the form's "expert fields" switch; a field with an error shows either way
(``schema_form.attach_errors``). Kept here, not in the schema's ``level`` metadata, because
it is the web form's choice: the CLI help and the reference YAML list every field."""

from __future__ import annotations

# What a beginner fills in to run GRPO on their own model and data (schema paths, ``[]`` for a
# list item); every other field is behind the "expert fields" switch.
BEGINNER_FIELDS = {
    "mode", "model.model_path", "model.max_response_tokens", "cluster.gpu_per_node",
    "algorithm.algorithm_type", "algorithm.repeat_times", "algorithm.optimizer.lr",
    "buffer.batch_size", "buffer.total_steps", "buffer.explorer_input.taskset.path",
    "buffer.explorer_input.taskset.format.prompt_key",
    "buffer.explorer_input.taskset.format.response_key",
    "buffer.explorer_input.eval_tasksets[].name", "buffer.explorer_input.eval_tasksets[].path",
    "explorer.eval_interval", "trainer.save_interval", "stages[].stage_name", "stages[].mode",
}  # fmt: skip
