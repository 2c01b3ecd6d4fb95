"""Weight sync between two separate jobs through the job dir (Trinity's async pair).

``mode: train`` and ``mode: explore`` run as two ``trinity run`` processes that share one job
dir and no Ray actor. The trainer publishes its weights every ``synchronizer.sync_interval``
steps with ``save_state_dict_for_sync`` (``global_step_N/actor`` + ``latest_state_dict_iteration.txt``);
at each of its sync points the explorer asks ``CheckpointWatch.newer`` whether a newer version
is there and, if so, loads it. The explorer never waits: when the trainer has published nothing
new it goes on with the weights it has.

The trainer keeps only the newest few sync-only ``global_step_N`` dirs, so the one named by
``latest_state_dict_iteration.txt`` can be replaced or pruned while the explorer reads it; the
read is then retried on whatever is newest.
"""

from __future__ import annotations

import logging
from pathlib import Path

from torch import Tensor

from rft_core.checkpoint.layout import latest_state_dict_step
from rft_core.checkpoint.store import load_step_weights
from rft_core.errors import CheckpointError

READ_ATTEMPTS = 3

log = logging.getLogger("rft_core.synchronizer")


class CheckpointWatch:
    """The explorer's half of checkpoint sync without a synchronizer actor."""

    def __init__(self, job_dir: str | Path):
        self.job_dir = Path(job_dir)

    def latest(self) -> int | None:
        """Step of the newest weights the trainer published, or None."""
        return latest_state_dict_step(self.job_dir)

    def newer(self, have: int) -> tuple[int, dict[str, Tensor]] | None:
        """``(version, state_dict)`` of the newest published weights when newer than ``have``;
        None at once when there is nothing newer (or it vanished on every read attempt)."""
        for _ in range(READ_ATTEMPTS):
            step = self.latest()
            if step is None or step <= have:
                return None
            try:
                return step, load_step_weights(self.job_dir, step)
            except (CheckpointError, OSError) as err:
                # replaced by a full checkpoint or pruned by the trainer while we read it
                log.info("weights of step %d changed while reading (%s); retrying", step, err)
        log.warning(
            "could not read the published weights of step %d in %s after %d attempts; "
            "going on with version %d",
            step,
            self.job_dir,
            READ_ATTEMPTS,
            have,
        )
        return None
