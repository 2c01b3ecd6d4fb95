"""A finished (or running) job dir's monitor record read back as the events it streamed.

    events, problems = read_job_events(job_dir, run_id="imported-7")

The reading counterpart of ``sinks.JsonlSink`` and ``actor_log``: for the job dir and each
stage's job dir below it (``checkpoint.layout.stage_job_dirs``) it reads

    monitor/<role>_metrics.jsonl   {"step", "time", <metric>: value, ...}  -> metric events
    monitor/<role>_system.jsonl    the same for its system/* metrics       -> metric events
    monitor/<role>_events.jsonl    {"kind": status|checkpoint, "step", "time", ...} -> those
    monitor/<role>_samples.jsonl   {"step", "time", prompt, response, ...} -> samples events
                                   (the lines of one step and time make one event)
    log/<actor>.log                "<asctime> <LEVEL> <logger>: <text>" -> log events
                                   (a line that does not start so continues the one before)

and returns them in time order (stable: a file's order is kept among equal times), each with
its stage's name. A line that is not what its file holds is skipped and named in ``problems``
(``file:line: what``) rather than stopping the read: a job dir killed mid-write ends in half a
line. Standard library only: the dashboard's web process imports it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rft_core.checkpoint.layout import stage_job_dirs
from rft_core.monitor.events import MonitorEvent

LOG_LINE_RE = re.compile(
    r"^(?P<date>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (?P<level>[A-Z]+) (?P<logger>\S+): "
)
LOG_TIME_FORMAT = "%Y-%m-%d %H:%M:%S,%f"
MAX_PROBLEMS = 20  # named one by one; more are counted


@dataclass
class JobRecord:
    events: list[MonitorEvent] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: int = 0  # lines skipped (problems names the first MAX_PROBLEMS)

    def problem(self, where: str, what: str) -> None:
        self.skipped += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"{where}: {what}")


def read_job_events(job_dir: str | Path, run_id: str) -> JobRecord:
    """Every event the job dir's monitor files and logs hold, in time order."""
    record = JobRecord()
    for stage, stage_dir in stage_job_dirs(Path(job_dir)):
        monitor_dir = stage_dir / "monitor"
        for path in sorted(monitor_dir.glob("*_metrics.jsonl")):
            _read_metrics(path, run_id, stage, record)
        for path in sorted(monitor_dir.glob("*_system.jsonl")):
            _read_metrics(path, run_id, stage, record, suffix="_system.jsonl")
        for path in sorted(monitor_dir.glob("*_events.jsonl")):
            _read_status_and_checkpoints(path, run_id, stage, record)
        for path in sorted(monitor_dir.glob("*_samples.jsonl")):
            _read_samples(path, run_id, stage, record)
        for path in sorted((stage_dir / "log").glob("*.log")):
            _read_log(path, run_id, stage, record)
    record.events.sort(key=lambda e: e.ts)  # stable: equal times keep their files' order
    return record


def _role(path: Path, suffix: str) -> str:
    return path.name[: -len(suffix)]


def _lines(path: Path, record: JobRecord):
    """(line number, parsed JSON object) of a JSONL file; bad lines go to ``record``."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                record.problem(where, f"not JSON ({err.msg})")
                continue
            if not isinstance(row, dict):
                record.problem(where, f"a JSON {type(row).__name__}, not an object")
                continue
            try:
                ts = float(row.pop("time"))
                step = row.pop("step", None)
                step = None if step is None else int(step)
            except (KeyError, TypeError, ValueError) as err:
                record.problem(where, f"no usable time/step ({err})")
                continue
            yield where, ts, step, row


def _read_metrics(
    path: Path, run_id: str, stage: str, record: JobRecord, suffix: str = "_metrics.jsonl"
) -> None:
    role = _role(path, suffix)
    for where, ts, step, row in _lines(path, record):
        data = {k: v for k, v in row.items() if v is None or isinstance(v, int | float)}
        if len(data) != len(row):
            record.problem(where, "a metric value that is not a number (the others kept)")
        record.events.append(MonitorEvent(run_id, "metric", role, step, data, ts, stage))


def _read_status_and_checkpoints(path: Path, run_id: str, stage: str, record: JobRecord) -> None:
    role = _role(path, "_events.jsonl")
    for where, ts, step, row in _lines(path, record):
        kind = row.pop("kind", None)
        if kind not in ("status", "checkpoint"):
            record.problem(where, f"kind {kind!r} is not status or checkpoint")
            continue
        record.events.append(MonitorEvent(run_id, kind, role, step, row, ts, stage))


def _read_samples(path: Path, run_id: str, stage: str, record: JobRecord) -> None:
    role = _role(path, "_samples.jsonl")
    batches: dict[tuple[int | None, float], list[dict[str, Any]]] = {}
    for _where, ts, step, row in _lines(path, record):
        batches.setdefault((step, ts), []).append(row)
    for (step, ts), samples in batches.items():
        event = MonitorEvent(run_id, "samples", role, step, {"samples": samples}, ts, stage)
        record.events.append(event)


def _read_log(path: Path, run_id: str, stage: str, record: JobRecord) -> None:
    actor = path.stem
    current: MonitorEvent | None = None
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.rstrip("\n")
            match = LOG_LINE_RE.match(line)
            if match is None:
                if current is not None:  # a traceback's lines belong to the record above
                    current.data["text"] += "\n" + line
                elif line.strip():
                    record.problem(f"{path}:{number}", "a log line without a time and level")
                continue
            ts = datetime.strptime(match["date"], LOG_TIME_FORMAT).timestamp()
            data = {"level": match["level"], "text": line}
            current = MonitorEvent(run_id, "log", actor, None, data, ts, stage)
            record.events.append(current)


__all__ = ["JobRecord", "read_job_events"]
