"""``replay_buffer`` as Trinity-RFT's priority queue (``rft_core.buffer.replay``): batches by
priority ``model_version - decay x use_count``, reused after a cooldown, evicted at capacity;
and its older spellings (``use_priority_queue``, ``reuse_cooldown_time``,
``replay_buffer_kwargs``) read with one warning naming the new key. The clock is a variable the
tests step by hand (no sleeping, no timing assertions)."""

from __future__ import annotations

import logging

import pytest
from run_configs import minimal_config

from rft_core.buffer.queue import QueueBuffer, replay_settings
from rft_core.buffer.replay import ReplayQueue
from rft_core.config import load_config_from_dict
from rft_core.errors import ConfigError
from rft_core.experience import Experience


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def batch(name: str, version: int, size: int = 2) -> list[Experience]:
    return [
        Experience(prompt_ids=[1], response_ids=[2], model_version=version, group_id=f"{name}{i}")
        for i in range(size)
    ]


def names(exps: list[Experience]) -> list[str]:
    return [e.group_id for e in exps]


def test_highest_priority_first_and_reuse_after_the_cooldown():
    clock = Clock()
    q = ReplayQueue(capacity=10, reuse_cooldown_time=10.0, clock=clock)  # linear_decay, decay 2
    q.put(batch("A", 0))  # priority 0 - 2*0 = 0
    q.put(batch("B", 1))  # 1
    q.put(batch("C", 2))  # 2
    assert q.order() == [(2.0, 2), (1.0, 1), (0.0, 0)]
    taken, status = q.get(2, timeout=0)
    assert (names(taken), status) == (["C0", "C1"], "ok")  # priority 2 first
    taken, status = q.get(2, timeout=0)
    assert (names(taken), status) == (["B0", "B1"], "ok")
    # t < 10: C and B cool down; only A (0) is left
    assert q.order() == [(0.0, 0)]
    clock.now = 10.0
    # back with use_count 1: C 2 - 2*1 = 0, B 1 - 2*1 = -1; A (0) was inserted before C's return
    assert q.order() == [(0.0, 0), (0.0, 2), (-1.0, 1)]
    assert names(q.get(2, timeout=0)[0]) == ["A0", "A1"]
    assert names(q.get(2, timeout=0)[0]) == ["C0", "C1"]
    assert names(q.get(2, timeout=0)[0]) == ["B0", "B1"]


def test_a_read_may_end_inside_a_batch_and_the_rest_comes_next():
    q = ReplayQueue(capacity=10)  # reuse_cooldown_time None: never reused
    q.put(batch("A", 0))
    q.put(batch("B", 1))
    taken, status = q.get(3, timeout=0)  # B (priority 1) then A (0); one of A left over
    assert (names(taken), status) == (["B0", "B1", "A0"], "ok")
    assert q.qsize() == 1
    assert names(q.get(1, timeout=0)[0]) == ["A1"]
    assert q.get(1, timeout=0) == ([], "timeout")  # nothing comes back without a cooldown


def test_a_full_queue_evicts_the_lowest_priority_oldest_or_drops_the_newcomer():
    q = ReplayQueue(capacity=2)
    q.put(batch("A", 1))
    q.put(batch("B", 1))
    q.put(batch("C", 0))  # priority 0 < lowest 1: dropped
    assert q.order() == [(1.0, 1), (1.0, 1)] and q.dropped == 1
    q.put(batch("D", 1))  # 1 >= lowest 1: the oldest of the lowest (A) goes
    taken, _ = q.get(4, timeout=0)
    assert names(taken) == ["B0", "B1", "D0", "D1"]


def test_decay_limit_randomization_reuses_at_most_use_count_limit_times():
    clock = Clock()
    q = ReplayQueue(
        reuse_cooldown_time=1.0,
        priority_fn="decay_limit_randomization",
        priority_fn_args={"decay": 0.5, "use_count_limit": 2},  # sigma 0: no noise
        clock=clock,
    )
    q.put(batch("A", 4))  # priority 4
    assert names(q.get(2, timeout=0)[0]) == ["A0", "A1"]
    clock.now = 1.0
    assert q.order() == [(3.5, 4)]  # use_count 1 < 2: back at 4 - 0.5*1
    q.get(2, timeout=0)
    clock.now = 2.0
    assert q.order() == []  # use_count 2: not < 2, gone


def test_close_stops_reuse_and_drains():
    clock = Clock()
    q = ReplayQueue(reuse_cooldown_time=5.0, clock=clock)
    q.put(batch("A", 0, size=1))
    q.get(1, timeout=0)
    q.close()
    clock.now = 100.0
    assert q.get(1, timeout=0) == ([], "closed")


def test_priority_fn_args_are_checked():
    with pytest.raises(ConfigError, match="linear_decay takes decay; not sigma"):
        ReplayQueue(priority_fn_args={"sigma": 1.0})


def _with_buffer(**eb) -> dict:
    d = minimal_config()
    d["buffer"]["trainer_input"] = {
        "experience_buffer": {"name": "exp", "storage_type": "queue", **eb}
    }
    return d


def test_use_priority_queue_is_read_as_replay_buffer_with_one_warning(caplog, tmp_path):
    with caplog.at_level(logging.WARNING):
        cfg = load_config_from_dict(
            _with_buffer(
                use_priority_queue=True,
                reuse_cooldown_time=30,
                replay_buffer_kwargs={"priority_fn": "decay_limit_randomization", "sigma": 0.1},
            )
        )
    eb = cfg.buffer.trainer_input.experience_buffer
    rb = eb.replay_buffer
    assert (rb.enable, rb.reuse_cooldown_time, rb.priority_fn) == (
        True,
        30.0,
        "decay_limit_randomization",
    )
    assert rb.priority_fn_args == {"sigma": 0.1}
    assert eb.use_priority_queue is None and eb.replay_buffer_kwargs is None
    old = "buffer.trainer_input.experience_buffer.use_priority_queue"
    warned = [r.getMessage() for r in caplog.records if old in r.getMessage()]
    assert warned == [
        f"{old} is an older Trinity-RFT spelling: read as "
        "buffer.trainer_input.experience_buffer.replay_buffer.enable"
    ]
    assert not [
        r
        for r in caplog.records
        if "replay_buffer" in r.getMessage() and "no effect" in r.getMessage()
    ]
    # the queue this config opens is the replay queue with these settings
    buf = QueueBuffer(
        name="exp", path=None, job_dir=tmp_path, in_process=True, replay=replay_settings(eb)
    )
    assert isinstance(buf._local, ReplayQueue) and buf._local.reuse_cooldown_time == 30.0


def test_replay_on_a_file_buffer_is_refused():
    d = _with_buffer(storage_type="file", path="/data/x.jsonl", replay_buffer={"enable": True})
    with pytest.raises(ConfigError) as info:
        load_config_from_dict(d)
    assert info.value.path == "buffer.trainer_input.experience_buffer.replay_buffer.enable"
    assert "storage_type file is read in order" in str(info.value)
