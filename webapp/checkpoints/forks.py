"""Fork a run from one of its checkpoints (W&B's ``fork_from``): a new run of the same
experiment whose job dir starts with the parent's ``global_step_<k>`` and whose steps go on
from k + 1, with the config the user edited (new hyperparameters from a good point).

    fork_config_yaml(checkpoint)                 # the parent's config, resuming, for the form
    fork_run(actor, checkpoint, config_yaml)     # the user's action: Run(queued), audited

The engine does the resuming with its one resume path (``rft_core.checkpoint.fork``: weights,
optimizer state and LR schedule position from the checkpoint; the config's hyperparameters).
The fork is the user's own run (its own ``run-<pk>`` job dir, queued like any other by
``webapp.runs.actions.queue_run``); ``Run.parent`` / ``fork_step`` link it to its parent,
whose page lists its forks. The launch task's part, linking the checkpoint into the fork's job
dir, is ``webapp.runs.fork_seed``. It lives in the checkpoints app: a fork starts from a
checkpoint (the runs app below it knows no Checkpoint).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rft_core.checkpoint.fork import check_step_dir
from rft_core.errors import CheckpointError
from webapp.accounts.access import check
from webapp.audit.record import Actor
from webapp.checkpoints.actions import refuse_if_pruned
from webapp.checkpoints.models import Checkpoint
from webapp.errors import ActionError
from webapp.experiments.config_policy import check_config, parse_yaml
from webapp.runs import actions
from webapp.runs.fork_seed import stages_before
from webapp.runs.models import Run


def fork_config_yaml(checkpoint: Checkpoint) -> str:
    """The parent run's config as launched, with ``continue_from_checkpoint: true`` (the
    fork resumes from the checkpoint it is given)."""
    data = parse_yaml(checkpoint.run.config_yaml) or {}
    data["continue_from_checkpoint"] = True
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def fork_run(actor: Actor, checkpoint: Checkpoint, config_yaml: str) -> Run:
    """A queued run that starts from ``checkpoint`` with ``config_yaml``; its launch task is
    enqueued once the row commits. Refused (nothing written) for a user who may not launch
    runs of the checkpoint's experiment, a checkpoint gone from disk or not a full one, a
    config with errors (each named by its YAML path), or Redis / Ray not answering."""
    parent = checkpoint.run
    experiment = parent.experiment
    check(actor, experiment, "run.fork")
    refuse_if_pruned(checkpoint, "fork from")
    try:
        check_step_dir(Path(checkpoint.path))
    except CheckpointError as err:
        raise ActionError(f"cannot fork from this checkpoint: {err}", status=409) from err
    checked = check_config(config_yaml=config_yaml)
    if not checked.config.continue_from_checkpoint:
        raise ActionError(
            "a fork resumes from its checkpoint",
            errors={"continue_from_checkpoint": "must be true in a fork"},
        )
    stages_before(checked.data, checkpoint.stage)
    return actions.queue_run(
        actor,
        experiment,
        checked,
        action="run.fork",
        version=parent.experiment_version,
        audit={
            "parent": parent.pk,
            "checkpoint": checkpoint.pk,
            "stage": checkpoint.stage,
            "step": checkpoint.step,
        },
        parent=parent,
        fork_stage=checkpoint.stage,
        fork_step=checkpoint.step,
        fork_from_path=checkpoint.path,
    )
