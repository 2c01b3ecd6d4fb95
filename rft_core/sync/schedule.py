"""When the explorer and the trainer exchange weights (Trinity-RFT's step and sync semantics).

The explorer syncs after step ``e`` when ``e > sync_offset`` and
``(e - sync_offset) % sync_interval == 0``; the trainer publishes after step ``t`` when
``t % sync_interval == 0``. With ``sync_offset=1, sync_interval=2``::

    explorer |1|2|3|sync|4|5|sync|6|
    trainer  |1|2|sync|3|4|sync|5|6|

so the explorer runs ``sync_offset`` steps ahead, and at its sync after step ``e`` it loads the
weights the trainer published after step ``e - sync_offset``.
"""

from __future__ import annotations


def explorer_syncs_after(step: int, sync_interval: int, sync_offset: int = 0) -> bool:
    """True when the explorer loads new weights after finishing explorer step ``step``."""
    if sync_interval <= 0:
        return False
    return step > sync_offset and (step - sync_offset) % sync_interval == 0


def trainer_syncs_after(step: int, sync_interval: int) -> bool:
    """True when the trainer publishes its weights after finishing trainer step ``step``."""
    if sync_interval <= 0:
        return False
    return step > 0 and step % sync_interval == 0


def trainer_version_for_explorer_sync(step: int, sync_offset: int = 0) -> int:
    """The trainer step whose weights the explorer loads at its sync after ``step``."""
    return step - sync_offset


def expected_model_versions(
    explorer_steps: int, sync_interval: int, sync_offset: int = 0
) -> list[int]:
    """Model version used by each explorer step 1..explorer_steps when every sync happens on
    schedule (the trainer never lags): the timeline of TRINITY_COMPAT.md as numbers."""
    versions, current = [], 0
    for step in range(1, explorer_steps + 1):
        versions.append(current)
        if explorer_syncs_after(step, sync_interval, sync_offset):
            current = trainer_version_for_explorer_sync(step, sync_offset)
    return versions


def explorer_resume_step(
    trainer_step: int | None, batch_size: int, repeat_times: int, train_batch_size: int
) -> int:
    """The explorer step a resumed run (explorer and trainer in one job) restarts after: the
    last one whose experiences the trainer's checkpoint of ``trainer_step`` trained on
    completely (its step when a trainer step reads exactly one explorer step's
    ``batch_size x repeat_times`` experiences)."""
    if not trainer_step:
        return 0
    return trainer_step * train_batch_size // (batch_size * repeat_times)
