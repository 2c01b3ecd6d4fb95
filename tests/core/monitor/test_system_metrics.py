"""System metrics of an actor (``rft_core.monitor.system``): CPU and memory read for real with
psutil from this process tree; the GPU part reads NVML, which this CPU machine lacks, so it is
the one thing mocked here: a fake ``pynvml`` module with two GPUs (tests say so by name)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from fake_pynvml import fake_pynvml

from rft_core.monitor import build_monitor
from rft_core.monitor.system import GB, GpuReader, SystemMetricsThread, SystemSampler


def test_mocked_gpu_metrics_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    gpu = GpuReader()
    # the process sees one GPU, NVML's device 1: it is this process's gpu0
    assert gpu.read() == {
        "gpu0/utilization_percent": 80.0,
        "gpu0/memory_used_gb": 30.0,
        "gpu0/memory_percent": 37.5,
    }
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert sorted(GpuReader().read()) == [
        "gpu0/memory_percent", "gpu0/memory_used_gb", "gpu0/utilization_percent",
        "gpu1/memory_percent", "gpu1/memory_used_gb", "gpu1/utilization_percent",
    ]  # fmt: skip


def test_without_nvml_or_a_driver_there_are_no_gpu_metrics(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    assert not GpuReader().available
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_init=True))  # no driver
    reader = GpuReader()
    assert not reader.available and reader.read() == {}
    sample = SystemSampler(gpu=reader).sample()
    assert not [k for k in sample if k.startswith("gpu")]


def test_the_process_tree_memory_counts_an_engine_child(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    sampler = SystemSampler()
    alone = sampler.sample()["memory_rss_gb"]
    # an engine process started by the actor, holding 300 MB
    child = subprocess.Popen(
        [sys.executable, "-c", "b = bytearray(300 * 1024**2); print('ready', flush=True); input()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "ready"
        sample = sampler.sample()
    finally:
        child.kill()
        child.wait()
    assert sample["memory_rss_gb"] >= alone + 0.25
    assert 0 < sample["host_memory_percent"] <= 100
    assert sample["cpu_percent"] >= 0 and 0 <= sample["host_cpu_percent"] <= 100


def test_system_metrics_reach_their_own_file_at_the_actors_step(tmp_path, monkeypatch):
    monkeypatch.delenv("RFT_EVENTS_REDIS_URL", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(util=(55,), used=(8 * GB,)))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monitor = build_monitor(
        "none", {}, tmp_path, role="explorer", run_name="demo", system_metrics_interval=0.05
    )
    monitor.log({"rollout/reward/mean": 0.5}, step=7)
    path = tmp_path / "monitor" / "explorer_system.jsonl"
    deadline = time.monotonic() + 60
    rows = []
    while not rows and time.monotonic() < deadline:
        time.sleep(0.05)
        text = path.read_text() if path.exists() else ""
        rows = [r for r in map(json.loads, text.splitlines()) if "step" in r
                and "system/explorer/cpu_percent" in r]  # fmt: skip
    monitor.close()
    assert rows, "no system metrics in 60 s"
    # the metrics file keeps one line per logged step: the training metrics only
    metrics = (tmp_path / "monitor" / "explorer_metrics.jsonl").read_text().splitlines()
    assert [sorted(json.loads(r)) for r in metrics] == [["rollout/reward/mean", "step", "time"]]
    row = rows[0]
    assert row["step"] == 7
    assert row["system/explorer/gpu0/utilization_percent"] == 55.0
    assert row["system/explorer/gpu0/memory_used_gb"] == 8.0
    assert row["system/explorer/memory_rss_gb"] > 0
    # closing stops the thread and shuts NVML down
    assert sys.modules["pynvml"].calls == ["shutdown"]


def test_interval_zero_writes_no_system_metrics(tmp_path, monkeypatch):
    monkeypatch.delenv("RFT_EVENTS_REDIS_URL", raising=False)
    monitor = build_monitor("none", {}, tmp_path, role="trainer", run_name="d")
    assert monitor._system is None
    monitor.close()


def test_a_failing_sample_is_logged_and_sampling_goes_on(caplog):
    got = []

    class Flaky:
        n = 0

        def sample(self):
            self.n += 1
            if self.n == 2:
                raise RuntimeError("psutil hiccup")
            return {"cpu_percent": float(self.n)}

        def close(self):
            pass

    thread = SystemMetricsThread("trainer", 0.01, got.append, sampler=Flaky())
    thread.start()
    deadline = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    thread.stop()
    assert got[:2] == [{"system/trainer/cpu_percent": 3.0}, {"system/trainer/cpu_percent": 4.0}]
    assert "psutil hiccup" in caplog.text


@pytest.mark.parametrize("role", ["explorer", "trainer"])
def test_system_metric_names_carry_the_role(role):
    got = SystemMetricsThread(role, 1.0, lambda m: None, sampler=SystemSampler(gpu=GpuReader()))
    names = list(got.prefixed())
    got.sampler.close()
    assert names and all(n.startswith(f"system/{role}/") for n in names)


def test_a_job_dirs_replay_reads_the_system_file_as_metrics_of_its_role(tmp_path):
    from rft_core.monitor.replay import read_job_events

    monitor_dir = tmp_path / "monitor"
    monitor_dir.mkdir()
    (monitor_dir / "trainer_metrics.jsonl").write_text('{"step": 1, "time": 1.0, "x": 2}\n')
    (monitor_dir / "trainer_system.jsonl").write_text(
        '{"step": 1, "time": 1.5, "system/trainer/cpu_percent": 40.0}\n'
    )
    record = read_job_events(tmp_path, "run-1")
    metrics = [(e.role, e.step, e.data) for e in record.events if e.kind == "metric"]
    assert metrics == [
        ("trainer", 1, {"x": 2}),
        ("trainer", 1, {"system/trainer/cpu_percent": 40.0}),
    ]
