"""One log file per Ray actor in ``<job_dir>/log/`` (the seed's tree): ``log_to_file`` adds a
file handler to the ``rft_core`` loggers of the process an actor runs in.

Files: explorer.log, trainer.log, synchronizer.log (set up by their actors), and for the
helpers ``trainer_rank<R>.log``, ``explorer_engine_<I>.log``, ``queue_<buffer name>.log``.
"""

from __future__ import annotations

import logging
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_to_file(path: str | Path | None, logger_name: str = "rft_core") -> None:
    """Send ``logger_name``'s records (INFO and up) to ``path`` too; None: nothing."""
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(logger_name)
    if any(
        isinstance(h, logging.FileHandler) and Path(h.baseFilename) == path.resolve()
        for h in logger.handlers
    ):
        return  # an actor process reused for the same file
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(FORMAT))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
