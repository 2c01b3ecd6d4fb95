"""The run's log: what ``trinity run`` tells on stderr about a run as it goes, one line per event,
in Trinity-RFT's INFO style (``2025-06-01 12:00:00 INFO run_log.py:123] ...``), so that a run
under ``nohup``, Slurm or a Ray job leaves its story in its log file.

    configure(level="info", quiet=False)   # the CLI: the handler on stderr, the level
    with StageLog(cfg) as stage_log:       # "stage X started" ... "stage X finished in 12.3s"
        while running:
            stage_log.poll()               # role start/end, evals, checkpoints, progress

A stage's lines come from what its roles write to ``<job_dir>/monitor/`` anyway (the JSONL
files of ``rft_core.monitor.sinks.JsonlSink``: status and checkpoint events, metrics), read
from where the last poll stopped; so the Ray path (``rft_core.runtime.stage``, the driver) and
the in-process path (``InProcessRun.run``) tell the same story from the same source, and the
actors need no channel of their own to the driver. The progress line comes every
``log.progress_steps`` steps of the stage's leading role (the explorer; the trainer in a
train-only stage) or ``log.progress_seconds``, whichever is first; where a terminal shows the
tqdm bar it is left out. ``log.level`` WARNING or ``--quiet``: warnings and errors only.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from tqdm import tqdm

FORMAT = "%(asctime)s %(levelname)s %(filename)s:%(lineno)d] %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
ROOT_LOGGER = "rft_core"  # the driver's rft_core lines (the launcher's too) share the handler
log = logging.getLogger("rft_core.run")

# (shown name, metric names tried in order): what a progress line shows of each role's metrics
KEY_METRICS = (
    ("reward", ("rollout/reward/mean",)),
    ("accuracy", ("rollout/accuracy/mean",)),
    ("loss", ("actor/sft_loss", "actor/dpo_loss", "actor/pg_loss", "actor/policy_loss")),
    ("token accuracy", ("actor/sft_token_accuracy",)),
)
STATE_VERBS = {"running": "started", "finished": "finished", "failed": "failed"}


class _TqdmStreamHandler(logging.StreamHandler):
    """Writes through ``tqdm.write``, so a line in a terminal lands above the progress bar
    instead of through it (outside a terminal it is a plain write to stderr)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        # the stderr of now: a test's captured stream that was closed, or one swapped in by
        # ``contextlib.redirect_stderr``, is never written to after it went away
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # logging.StreamHandler.__init__ and setStream set it
        pass

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001 - logging must never raise into the run
            self.handleError(record)


def configure(level: str = "info", quiet: bool = False) -> None:
    """The run's log on stderr at ``level`` (``log.level``); ``quiet``: warnings and errors only.
    Called again (once the config is read), it only changes the level."""
    value = logging.getLevelName(level.upper())
    if not isinstance(value, int):
        raise ValueError(f"log level {level!r} is not one of debug, info, warning, error")
    if quiet:
        value = max(value, logging.WARNING)
    root = logging.getLogger(ROOT_LOGGER)
    handler = next((h for h in root.handlers if isinstance(h, _TqdmStreamHandler)), None)
    if handler is None:
        handler = _TqdmStreamHandler()
        handler.setFormatter(logging.Formatter(FORMAT, DATE_FORMAT))
        root.addHandler(handler)
    handler.setLevel(value)
    root.setLevel(value)


def progress_shown() -> bool:
    """Whether progress is wanted (the bar in a terminal, the lines elsewhere): yes unless
    ``configure`` set WARNING or ``quiet``."""
    root = logging.getLogger(ROOT_LOGGER)
    configured = any(isinstance(h, _TqdmStreamHandler) for h in root.handlers)
    return not configured or root.isEnabledFor(logging.INFO)


@dataclass
class _Tail:
    """New whole lines of one JSONL file since the last read (a half-written line waits)."""

    path: Path
    offset: int = 0

    def __post_init__(self) -> None:
        # a resumed run appends to its files: what they held before this stage is not news
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def rows(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        return [json.loads(line) for line in chunk[:end].splitlines() if line.strip()]


@dataclass
class _Role:
    events: _Tail
    metrics: _Tail
    step: int | None = None
    latest: dict[str, float] = field(default_factory=dict)  # the last value of each metric
    first_seen: tuple[float, int] | None = None  # (time, step) of its first step here
    last_seen: tuple[float, int] | None = None  # (time, step) of its latest step


class StageLog:
    """The log lines of one stage (module docstring). ``progress_lines``: False where a
    terminal's bar shows the progress instead."""

    def __init__(self, cfg: Any, progress_lines: bool = True):
        self.label = cfg.stage_name or cfg.name
        self.mode = cfg.mode
        self.job_dir = Path(cfg.job_dir)
        self.lead = "trainer" if cfg.mode == "train" else "explorer"
        self.total: int | None = cfg.buffer.total_steps or (
            cfg.trainer.total_steps if cfg.mode == "train" else None
        )
        self.every_steps = int(cfg.log.progress_steps)
        self.every_s = float(cfg.log.progress_seconds)
        self.progress_lines = progress_lines
        monitor = self.job_dir / "monitor"
        self.roles = {
            role: _Role(
                _Tail(monitor / f"{role}_events.jsonl"), _Tail(monitor / f"{role}_metrics.jsonl")
            )
            for role in ("explorer", "trainer")
        }
        self.started_at = time.monotonic()
        self.last_progress = (self.started_at, 0)  # (when, step) of the last progress line

    def __enter__(self) -> StageLog:
        steps = f"{self.total} steps" if self.total else "steps: to the end of the data"
        log.info(
            "stage %s started: mode %s, %s, job dir %s", self.label, self.mode, steps, self.job_dir
        )
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.poll(final=True)
        took = time.monotonic() - self.started_at
        steps = ", ".join(f"{r} step {s.step}" for r, s in self.roles.items() if s.step is not None)
        if exc_type is None:
            log.info(
                "stage %s finished in %.1fs%s", self.label, took, f": {steps}" if steps else ""
            )
        else:
            log.error("stage %s failed after %.1fs: %s", self.label, took, exc)

    def poll(self, total: int | None = None, final: bool = False) -> None:
        """Log what the roles wrote since the last poll, and a progress line when one is due;
        ``total``: the lead role's step count when it knows better (an epoch-based taskset)."""
        if total:
            self.total = total
        news = [
            (row, role, self._event) for role, s in self.roles.items() for row in s.events.rows()
        ]
        news += [
            (row, role, self._metrics) for role, s in self.roles.items() for row in s.metrics.rows()
        ]
        for row, role, tell in sorted(news, key=lambda new: new[0].get("time") or 0.0):
            tell(role, row)  # in the order they happened, across the roles' files
        if not final:
            self._progress()

    # -- the lines ---------------------------------------------------------------------------

    def _event(self, role: str, row: dict[str, Any]) -> None:
        if row.get("kind") == "checkpoint":
            name = Path(str(row.get("path", ""))).name or f"global_step_{row.get('step')}"
            log.info(
                "%s: checkpoint %s saved by the %s (%s)", self.label, name, role, row.get("path")
            )
        elif row.get("kind") == "status" and row.get("state") in STATE_VERBS:
            verb = STATE_VERBS[row["state"]]
            message = str(row.get("message") or "")
            detail = message.removeprefix(role).removeprefix(f" {verb}").removeprefix(":").strip()
            level = logging.ERROR if row["state"] == "failed" else logging.INFO
            sep = ": " if row["state"] == "failed" else " "  # "failed: <the error>"
            log.log(
                level, "%s: %s %s%s", self.label, role, verb, f"{sep}{detail}" if detail else ""
            )

    def _metrics(self, role: str, row: dict[str, Any]) -> None:
        state, step = self.roles[role], row.get("step")
        evals = {
            k: v for k, v in row.items() if k.startswith(("eval/", "bench/")) and "/std@" not in k
        }
        if evals:
            kind = "bench" if next(iter(evals)).startswith("bench/") else "eval"
            shown = ", ".join(f"{k.split('/', 1)[1]}={_num(v)}" for k, v in evals.items())
            took = row.get(f"time/{kind}")
            log.info(
                "%s: %s at step %s: %s%s",
                self.label,
                kind,
                step,
                shown,
                f" ({took:.1f}s)" if isinstance(took, (int, float)) else "",
            )
            return
        if not isinstance(step, int):
            return
        state.latest.update({k: v for k, v in row.items() if isinstance(v, (int, float))})
        seen = (float(row.get("time") or time.time()), step)
        if state.step is None or step > state.step:
            state.step, state.last_seen = step, seen
        state.first_seen = state.first_seen or seen
        if role == self.lead:  # a line per N steps also when one poll reads several steps
            self._progress(by_time=False)

    def _progress(self, by_time: bool = True) -> None:
        lead = self.roles[self.lead]
        now = time.monotonic()
        last_at, last_step = self.last_progress
        step = lead.step if lead.step is not None else last_step
        due_by_steps = step // self.every_steps > last_step // self.every_steps
        due_by_time = by_time and now - last_at >= self.every_s
        if not self.progress_lines or not (due_by_steps or due_by_time):
            return
        self.last_progress = (now, step)
        log.info("%s", self._progress_text(lead))

    def _progress_text(self, lead: _Role) -> str:
        step = lead.step or 0
        text = (
            f"{self.label}: step {step}/{self.total}"
            if self.total
            else f"{self.label}: step {step}"
        )
        if self.total:
            text += f" ({100 * step / self.total:.0f}%)"
        shown = []
        for name, keys in KEY_METRICS:
            for state in self.roles.values():
                value = next(
                    (state.latest[k] for k in keys if state.latest.get(k) is not None), None
                )
                if value is not None:
                    shown.append(f"{name} {_num(value)}")
                    break
        rate = _rate(lead)
        if rate:
            shown.append(f"{rate:.3g} steps/s")
            if self.total and step < self.total:
                shown.append(f"ETA {timedelta(seconds=round((self.total - step) / rate))}")
        return f"{text}, {', '.join(shown)}" if shown else text


def _rate(state: _Role) -> float | None:
    """Steps a second since the role's first step of this stage (its model load left out)."""
    if state.first_seen is None or state.last_seen is None:
        return None
    (start, first), (now, last) = state.first_seen, state.last_seen
    return (last - first) / (now - start) if last > first and now > start else None


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


__all__ = ["StageLog", "configure", "progress_shown"]
