"""The run event stream: the one wire format between a run's monitor and the dashboard.

A run whose processes have ``RFT_EVENTS_REDIS_URL``, ``RFT_REDIS_PREFIX`` and ``RFT_RUN_ID`` set
(the dashboard sets them when it launches one) appends events to the Redis stream
``rft:<prefix>:run:<run_id>`` and adds ``<run_id>`` to the set ``rft:<prefix>:runs`` so that
consumers can discover it. The prefix is the dashboard's deployment prefix: every key, stream
and channel a deployment uses lies under ``rft:<prefix>:``, so two deployments (or a test
session and a demo) on one Redis server never meet. Every entry has the string fields below;
``data`` is JSON. Stream entry ids give the order.

    run    the run id the dashboard gave (RFT_RUN_ID)
    kind   metric | log | checkpoint | status | heartbeat | samples | phase
    role   explorer | trainer | launcher | ...
    stage  the stage's stage_name ("" for a config without stages): a staged run's roles and
           step numbers start again in each stage
    step   integer step, or "" when the event has none
    ts     unix time in seconds (float, as text)
    data   JSON object: metric -> {name: value}; log -> {level, text};
           checkpoint -> {path}; status -> {state, message}; heartbeat -> {};
           samples -> {"samples": [{prompt, response, truth, reward, reward_parts, advantage,
           tokens, logprobs, ...}]} (the rollouts ``monitor.rollout_samples_*`` keeps of one
           explorer step; ``rft_core.explorer.rollout_samples`` lists the fields)
           phase -> {phase}: what the role does from now on, one of ``PHASES`` (sent when it
           changes; ``step`` is the step it works towards)

This module imports nothing but the standard library: the dashboard's web process uses it.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Set on a run's processes (the dashboard sets both at launch): its monitor then streams here.
ENV_REDIS_URL = "RFT_EVENTS_REDIS_URL"
ENV_RUN_ID = "RFT_RUN_ID"
ENV_HEARTBEAT_S = "RFT_HEARTBEAT_S"  # seconds between heartbeats on the stream (default 10)

# The deployment prefix (the dashboard's ``RFT_REDIS_PREFIX`` setting; a launch sets it on the run)
ENV_REDIS_PREFIX = "RFT_REDIS_PREFIX"
REDIS_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
REDIS_PREFIX_RULE = "1-40 characters of letters, digits, '.', '_' or '-'"

KINDS = ("metric", "log", "checkpoint", "status", "heartbeat", "samples", "phase")
# What a role is doing: the explorer's rollouts and evals, the trainer's optimizer steps and
# checkpoint saves, and either one waiting for the other (experiences, or new weights).
PHASES = ("rollout", "train", "eval", "checkpoint", "waiting")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")


def check_redis_prefix(prefix: str, source: str = ENV_REDIS_PREFIX) -> str:
    """``prefix`` when it is a valid deployment prefix, else ValueError naming ``source`` and the
    rule in one line."""
    if not isinstance(prefix, str) or not REDIS_PREFIX_RE.match(prefix):
        raise ValueError(
            f"{source}={prefix!r} is not a valid Redis key prefix: it must be {REDIS_PREFIX_RULE}"
        )
    return prefix


def redis_prefix() -> str:
    """The deployment prefix of this process (``RFT_REDIS_PREFIX``), checked."""
    prefix = os.environ.get(ENV_REDIS_PREFIX)
    if prefix is None:
        raise ValueError(
            f"{ENV_REDIS_PREFIX} is not set: a run streaming to a dashboard needs the dashboard's "
            "deployment prefix (a dashboard's launch or `trinity run` with RFT_DASHBOARD_URL sets "
            "it; else copy its var/redis_prefix)"
        )
    return check_redis_prefix(prefix)


def namespace(prefix: str | None = None) -> str:
    """``rft:<prefix>:``, the start of every Redis key and channel of the deployment."""
    return f"rft:{check_redis_prefix(prefix) if prefix is not None else redis_prefix()}:"


def stream_prefix(prefix: str | None = None) -> str:
    return f"{namespace(prefix)}run:"


def runs_set(prefix: str | None = None) -> str:
    """The set of run ids of the deployment: how consumers discover new streams."""
    return f"{namespace(prefix)}runs"


def stream_key(run_id: str, prefix: str | None = None) -> str:
    """The event stream of ``run_id`` (``prefix``: the deployment's, default ``RFT_REDIS_PREFIX``)."""
    return f"{stream_prefix(prefix)}{run_id}"


def run_id_of(key: str | bytes, prefix: str | None = None) -> str:
    key = key.decode() if isinstance(key, bytes) else key
    start = stream_prefix(prefix)
    if not key.startswith(start):
        raise ValueError(f"not a run event stream key of {start}*: {key!r}")
    return key[len(start) :]


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
