"""The run event stream: the one wire format between a run's monitor and the dashboard.

A run whose processes have ``RFT_EVENTS_REDIS_URL`` and ``RFT_RUN_ID`` set (the dashboard sets
them when it launches one) appends events to the Redis stream ``rft:run:<run_id>`` and
adds ``<run_id>`` to the set ``rft:runs`` so that consumers can discover it. Every entry has
the string fields below; ``data`` is JSON. Stream entry ids give the order.

    run    the run id the dashboard gave (RFT_RUN_ID)
    kind   metric | log | checkpoint | status | heartbeat | samples
    role   explorer | trainer | launcher | ...
    stage  the stage's stage_name ("" for a config without stages): a staged run's roles and
           step numbers start again in each stage
    step   integer step, or "" when the event has none
    ts     unix time in seconds (float, as text)
    data   JSON object: metric -> {name: value}; log -> {level, text};
           checkpoint -> {path}; status -> {state, message}; heartbeat -> {};
           samples -> {"samples": [{prompt, response, truth, reward, <reward parts>...}]}
           (a handful of one rollout step's experiences, see ``ENV_SAMPLES_PER_STEP``)

This module imports nothing but the standard library: the dashboard's web process uses it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Set on a run's processes (the dashboard sets both at launch): its monitor then streams here.
ENV_REDIS_URL = "RFT_EVENTS_REDIS_URL"
ENV_RUN_ID = "RFT_RUN_ID"
ENV_HEARTBEAT_S = "RFT_HEARTBEAT_S"  # seconds between heartbeats on the stream (default 10)
# rollouts the explorer samples per step for the dashboard's samples panel (default 4; 0: none)
ENV_SAMPLES_PER_STEP = "RFT_SAMPLES_PER_STEP"
SAMPLES_PER_STEP = 4

STREAM_PREFIX = "rft:run:"
RUNS_SET = "rft:runs"
KINDS = ("metric", "log", "checkpoint", "status", "heartbeat", "samples")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")


def stream_key(run_id: str) -> str:
    return f"{STREAM_PREFIX}{run_id}"


def run_id_of(key: str | bytes) -> str:
    key = key.decode() if isinstance(key, bytes) else key
    if not key.startswith(STREAM_PREFIX):
        raise ValueError(f"not a run event stream key: {key!r}")
    return key[len(STREAM_PREFIX) :]


@dataclass
class MonitorEvent:
    run_id: str
    kind: str
    role: str
    step: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)
    stage: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"event kind {self.kind!r} is not one of {', '.join(KINDS)}")

    def to_fields(self) -> dict[str, str]:
        return {
            "run": self.run_id,
            "kind": self.kind,
            "role": self.role,
            "stage": self.stage,
            "step": "" if self.step is None else str(int(self.step)),
            "ts": repr(float(self.ts)),
            "data": json.dumps(self.data, separators=(",", ":"), allow_nan=True),
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str | bytes, str | bytes]) -> MonitorEvent:
        text = {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in fields.items()
        }
        step = text.get("step", "")
        return cls(
            run_id=text["run"],
            kind=text["kind"],
            role=text.get("role", ""),
            step=int(step) if step not in ("", None) else None,
            data=json.loads(text.get("data") or "{}"),
            ts=float(text.get("ts") or 0.0),
            stage=text.get("stage", ""),
        )
