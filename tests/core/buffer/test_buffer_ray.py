"""The queue buffer backed by a named Ray actor, crossing two Ray actors, with its mirror."""

from __future__ import annotations

import sqlite3

import pytest
import ray

from rft_core.buffer import build_buffer
from rft_core.experience import Experience


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0)
class Explorer:
    def __init__(self, job_dir: str):
        self.buffer = build_buffer(
            "queue", name="experience_buffer", path="sqlite:///mirror.db", job_dir=job_dir
        )

    def explore(self, start: int, count: int) -> int:
        batch = [
            Experience(prompt_ids=[7], response_ids=[i], reward=float(i), group_id=f"g{i}")
            for i in range(start, start + count)
        ]
        self.buffer.put(batch)
        return count

    def finish(self) -> None:
        self.buffer.close()


@ray.remote(num_cpus=0)
class Trainer:
    def __init__(self, job_dir: str):
        self.buffer = build_buffer(
            "queue",
            name="experience_buffer",
            path="sqlite:///mirror.db",
            job_dir=job_dir,
            role="reader",
        )

    def read(self, n: int) -> list[float]:
        return [e.reward for e in self.buffer.get(n, timeout=60)]

    def state(self) -> dict:
        return self.buffer.state()


def test_queue_actor_carries_experiences_between_actors(ray_cluster, tmp_path):
    job_dir = str(tmp_path)
    # the launcher (driver) opens the queue first so it lives as long as the job
    driver_side = build_buffer(
        "queue", name="experience_buffer", path="sqlite:///mirror.db", job_dir=tmp_path
    )
    assert driver_side.is_remote
    explorer, trainer = Explorer.remote(job_dir), Trainer.remote(job_dir)
    pending = trainer.read.remote(6)  # blocks: nothing written yet
    ray.get(explorer.explore.remote(0, 4))
    ready, _ = ray.wait([pending], timeout=0.5)
    assert not ready  # 4 < 6 still waiting
    ray.get(explorer.explore.remote(4, 4))
    assert ray.get(pending) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert driver_side.qsize() == 2
    ray.get(explorer.finish.remote())
    assert ray.get(trainer.read.remote(6)) == [6.0, 7.0]  # end of data: the remainder
    assert ray.get(trainer.read.remote(6)) == []
    assert ray.get(trainer.state.remote()) == {"consumed": 8}
    # the queue actor mirrored everything into <job_dir>/buffer/mirror.db
    with sqlite3.connect(tmp_path / "buffer" / "mirror.db") as db:
        rewards = [r[0] for r in db.execute("SELECT reward FROM experience_buffer ORDER BY id")]
    assert rewards == [float(i) for i in range(8)]


def test_queues_of_different_jobs_are_separate(ray_cluster, tmp_path):
    a = build_buffer("queue", name="experience_buffer", path=None, job_dir=tmp_path / "a")
    b = build_buffer("queue", name="experience_buffer", path=None, job_dir=tmp_path / "b")
    a.put([Experience(prompt_ids=[1], response_ids=[2], reward=1.0)])
    assert (a.qsize(), b.qsize()) == (1, 0)
