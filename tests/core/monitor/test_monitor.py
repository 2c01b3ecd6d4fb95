"""The monitor's sinks, each read back for real: JSONL lines, a TensorBoard event file read with
TensorBoard's own EventAccumulator, and a Redis stream read with XRANGE."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import pytest
from run_configs import trinity_run
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rft_core.errors import ConfigError, EngineUnavailable, ServiceUnavailable
from rft_core.monitor import MonitorEvent, MonitorLogHandler, build_monitor, runs_set, stream_key


@pytest.fixture
def no_dashboard_env(monkeypatch):
    monkeypatch.delenv("RFT_EVENTS_REDIS_URL", raising=False)
    monkeypatch.delenv("RFT_RUN_ID", raising=False)


def test_jsonl_sink_writes_one_line_per_metric_event(tmp_path, no_dashboard_env):
    with build_monitor("tensorboard", {}, tmp_path, role="trainer", run_name="demo") as monitor:
        monitor.log({"actor/pg_loss": 0.25, "actor/ppo_kl": 0.01}, step=1)
        monitor.log({"actor/pg_loss": 0.125}, step=2)
        monitor.checkpoint_saved(2, "/ckpt/global_step_2")
        monitor.status("finished", "done")

    lines = [
        json.loads(x)
        for x in (tmp_path / "monitor" / "trainer_metrics.jsonl").read_text().splitlines()
    ]
    assert [(x["step"], x["actor/pg_loss"]) for x in lines] == [(1, 0.25), (2, 0.125)]
    assert lines[0]["actor/ppo_kl"] == 0.01
    events = [
        json.loads(x)
        for x in (tmp_path / "monitor" / "trainer_events.jsonl").read_text().splitlines()
    ]
    assert [(e["kind"], e["step"]) for e in events] == [("checkpoint", 2), ("status", None)]
    assert events[0]["path"] == "/ckpt/global_step_2"
    assert events[1]["state"] == "finished"


def test_tensorboard_sink_writes_scalars_tensorboard_can_read(tmp_path, no_dashboard_env):
    monitor = build_monitor("tensorboard", {}, tmp_path, role="explorer", run_name="demo")
    for step, acc in [(1, 0.5), (2, 0.75), (3, 0.875)]:
        monitor.log({"rollout/accuracy/mean": acc}, step=step)
    monitor.close()

    acc = EventAccumulator(str(tmp_path / "monitor" / "tensorboard" / "explorer"))
    acc.Reload()
    scalars = acc.Scalars("rollout/accuracy/mean")
    assert [(s.step, s.value) for s in scalars] == [(1, 0.5), (2, 0.75), (3, 0.875)]


@pytest.fixture
def dashboard_run(monkeypatch, redis_client, redis_url, unique_id):
    """The env the dashboard sets on a run it launches; the run's stream is deleted after."""
    monkeypatch.setenv("RFT_EVENTS_REDIS_URL", redis_url)
    monkeypatch.setenv("RFT_RUN_ID", unique_id)
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")  # only the heartbeat sent at start
    redis_client.test_keys.append(stream_key(unique_id))
    yield unique_id
    redis_client.srem(runs_set(), unique_id)


def test_redis_sink_streams_every_kind_tagged_with_the_run_id(
    tmp_path, redis_client, dashboard_run
):
    unique_id = dashboard_run
    monitor = build_monitor(
        "tensorboard", {}, tmp_path, role="trainer", run_name="demo", stage="sft_warmup"
    )
    monitor.status("running")
    monitor.log({"actor/pg_loss": 0.5}, step=4)
    monitor.log_line("step 4 done", "INFO")
    monitor.checkpoint_saved(4, "/ckpt/global_step_4")
    monitor.heartbeat()
    monitor.close()

    entries = redis_client.xrange(stream_key(unique_id))
    events = [MonitorEvent.from_fields(fields) for _, fields in entries]
    kinds = [e.kind for e in events]
    assert kinds == ["heartbeat", "status", "metric", "log", "checkpoint", "heartbeat"]
    assert {e.run_id for e in events} == {unique_id}
    assert {e.role for e in events} == {"trainer"}
    assert {e.stage for e in events} == {"sft_warmup"}  # a staged run's stages stay apart
    assert events[2].step == 4 and events[2].data == {"actor/pg_loss": 0.5}
    assert events[3].data == {"level": "INFO", "text": "step 4 done"}
    assert events[4].data == {"path": "/ckpt/global_step_4"}
    assert redis_client.sismember(runs_set(), unique_id)


def test_log_handler_forwards_records_to_the_stream(tmp_path, redis_client, dashboard_run):
    unique_id = dashboard_run
    monitor = build_monitor("tensorboard", {}, tmp_path, role="explorer", run_name="demo")
    log = logging.getLogger(f"test.{unique_id}")
    log.setLevel(logging.INFO)
    log.addHandler(MonitorLogHandler(monitor))
    log.warning("reward is %s", 0.5)
    log.debug("not forwarded")
    monitor.close()
    events = [MonitorEvent.from_fields(f) for _, f in redis_client.xrange(stream_key(unique_id))]
    events = [e for e in events if e.kind != "heartbeat"]
    assert [(e.kind, e.data["level"], e.data["text"]) for e in events] == [
        ("log", "WARNING", "reward is 0.5")
    ]


def test_heartbeats_keep_coming_until_close(tmp_path, redis_client, dashboard_run, monkeypatch):
    monkeypatch.setenv("RFT_HEARTBEAT_S", "0.05")
    monitor = build_monitor("tensorboard", {}, tmp_path, role="explorer", run_name="demo")
    key = stream_key(dashboard_run)
    deadline = time.monotonic() + 30
    while redis_client.xlen(key) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    monitor.close()
    count = redis_client.xlen(key)
    assert count >= 4
    time.sleep(0.3)
    assert redis_client.xlen(key) == count  # the thread stopped with close()


@pytest.mark.timeout(60)
def test_a_redis_that_dies_mid_run_drops_events_without_hanging_the_run(tmp_path, monkeypatch):
    """The Redis sink's warning goes through MonitorLogHandler back into the monitor: this must
    neither deadlock nor raise, and the JSONL file keeps the full record."""
    from workers.services import free_port, start_redis

    port = free_port()
    server = start_redis(port, tmp_path / "redis")
    monkeypatch.setenv("RFT_EVENTS_REDIS_URL", f"redis://127.0.0.1:{port}/0")
    monkeypatch.setenv("RFT_RUN_ID", "dying")
    monkeypatch.setenv("RFT_HEARTBEAT_S", "3600")
    monitor = build_monitor("tensorboard", {}, tmp_path, role="trainer", run_name="demo")
    log = logging.getLogger("rft_core.monitor")  # the sink logs its warning here
    handler = MonitorLogHandler(monitor)
    logging.getLogger("rft_core").addHandler(handler)
    try:
        monitor.log({"actor/pg_loss": 1.0}, step=1)
        server.terminate()
        server.wait(timeout=10)
        monitor.log({"actor/pg_loss": 0.5}, step=2)
        log.warning("still logging")
        monitor.close()
    finally:
        logging.getLogger("rft_core").removeHandler(handler)
    redis_sink = monitor.sinks[-1]
    assert redis_sink.dropped >= 2
    lines = (tmp_path / "monitor" / "trainer_metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["actor/pg_loss"] for x in lines] == [1.0, 0.5]


def test_unreachable_events_redis_is_one_clear_error(tmp_path, monkeypatch):
    from workers.services import free_port

    monkeypatch.setenv("RFT_EVENTS_REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    monkeypatch.setenv("RFT_RUN_ID", "run1")
    with pytest.raises(ServiceUnavailable, match="RFT_EVENTS_REDIS_URL"):
        build_monitor("tensorboard", {}, tmp_path, role="trainer", run_name="demo")


def test_unknown_monitor_type_names_the_yaml_path_and_choices(tmp_path, no_dashboard_env):
    with pytest.raises(ConfigError) as err:
        build_monitor("tensorbord", {}, tmp_path, role="trainer", run_name="demo")
    assert err.value.path == "monitor.monitor_type"
    assert "tensorboard, wandb, mlflow" in str(err.value)
    assert "did you mean 'tensorboard'" in str(err.value)


def test_a_monitor_type_is_one_registered_sink_factory(tmp_path, no_dashboard_env):
    """``monitor.monitor_type`` picks from the MONITORS registry: a registered type's sinks are
    written beside the JSONL file, with no second list of types to extend."""
    from rft_core.monitor import MONITORS

    class Recorder:
        def __init__(self) -> None:
            self.events: list = []

        def write(self, event) -> None:
            self.events.append(event)

        def close(self) -> None:
            pass

    recorder = Recorder()
    MONITORS.add("recorder_for_test", lambda monitor_dir, role, run_name, args: [recorder])
    try:
        monitor = build_monitor("recorder_for_test", {}, tmp_path, role="trainer", run_name="d")
        monitor.log({"actor/pg_loss": 1.0}, 1)
        monitor.close()
    finally:
        MONITORS._entries.pop("recorder_for_test")
    assert [e.data for e in recorder.events if e.kind == "metric"] == [{"actor/pg_loss": 1.0}]
    assert (tmp_path / "monitor" / "trainer_metrics.jsonl").exists()


@pytest.mark.parametrize("monitor_type, package", [("wandb", "wandb"), ("mlflow", "mlflow")])
def test_optional_monitor_without_its_package_says_how_to_install(
    tmp_path, no_dashboard_env, monkeypatch, monitor_type, package
):
    # A None entry in sys.modules makes `import package` raise ImportError, as on a machine without it.
    monkeypatch.setitem(sys.modules, package, None)
    with pytest.raises(EngineUnavailable, match=f"pip install {package}"):
        build_monitor(monitor_type, {}, tmp_path, role="trainer", run_name="demo")


@pytest.mark.parametrize("package", ["wandb", "mlflow"])
def test_the_preflight_refuses_a_missing_backend_before_any_actor(
    no_dashboard_env, monkeypatch, package
):
    from rft_core.monitor.monitor import check_monitor

    monkeypatch.setitem(sys.modules, package, None)  # as on a machine without it
    with pytest.raises(EngineUnavailable, match=f"monitor.monitor_type: {package} needs the"):
        check_monitor(package, "demo")


def test_wandb_monitor_writes_an_offline_run_wandb_reads_back(
    tmp_path, no_dashboard_env, monkeypatch
):
    # the real wandb package, offline (WANDB_MODE as a user without a W&B server sets it)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    args = {"project": "rft-test"}
    with build_monitor("wandb", args, tmp_path, role="trainer", run_name="demo") as monitor:
        sink = next(s for s in monitor.sinks if type(s).__name__ == "WandbSink")
        monitor.log({"actor/pg_loss": 0.5, "eval/held/accuracy/mean@1": 0.25}, step=1)
        monitor.log({"actor/pg_loss": 0.125}, step=2)
    run_dir = sink.run_dir
    assert run_dir.parent == tmp_path / "monitor" / "wandb"
    assert run_dir.name.startswith("offline-run-")
    # the run's record file, which `wandb sync` uploads later, holds both steps' history rows
    # (protobuf: each metric's key and its value as JSON text)
    (record,) = run_dir.glob("run-*.wandb")
    data = record.read_bytes()
    assert b"actor/pg_loss" in data and b"eval/held/accuracy/mean@1" in data
    assert b"0.125" in data and b"0.25" in data


def test_mlflow_monitor_writes_a_local_store_mlflow_reads_back(tmp_path, no_dashboard_env):
    from mlflow.tracking import MlflowClient

    args = {"experiment": "rft-test"}
    for role in ("explorer", "trainer"):  # two roles in one process: one MLflow run each
        with build_monitor("mlflow", args, tmp_path, role=role, run_name="demo") as monitor:
            monitor.log({"actor/pg_loss": 0.5}, step=1)
            monitor.log({"actor/pg_loss": 0.125, "actor/nan": float("nan")}, step=2)
    client = MlflowClient(tracking_uri=(tmp_path / "monitor" / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("rft-test")
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.run_name"])
    assert [r.info.run_name for r in runs] == ["demo_explorer", "demo_trainer"]
    assert all(r.info.status == "FINISHED" for r in runs)
    history = client.get_metric_history(runs[1].info.run_id, "actor/pg_loss")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.5), (2, 0.125)]
    assert client.get_metric_history(runs[1].info.run_id, "actor/nan") == []


def test_monitor_type_none_keeps_only_the_jsonl_file(tmp_path, no_dashboard_env):
    monitor = build_monitor("none", {}, tmp_path, role="trainer", run_name="demo")
    monitor.log({"actor/pg_loss": 1.0}, 1)
    monitor.close()
    assert (tmp_path / "monitor" / "trainer_metrics.jsonl").exists()
    assert not (tmp_path / "monitor" / "tensorboard").exists()


def test_trinity_run_refuses_a_missing_backend_and_an_unreachable_stream_before_ray(
    tmp_path, no_dashboard_env, redis_url
):
    from workers.services import free_port

    demo = Path(__file__).resolve().parents[3] / "examples" / "demo" / "grpo_demo.yaml"
    cases = [
        (
            [],
            {"RFT_EVENTS_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "RFT_RUN_ID": "r1"},
            "RFT_EVENTS_REDIS_URL",
        ),
        (  # a stream without the dashboard's deployment prefix would never be read
            [],
            {"RFT_EVENTS_REDIS_URL": redis_url, "RFT_RUN_ID": "r1", "RFT_REDIS_PREFIX": None},
            "RFT_REDIS_PREFIX is not set",
        ),
        (
            [],
            {"RFT_EVENTS_REDIS_URL": redis_url, "RFT_RUN_ID": "r1", "RFT_REDIS_PREFIX": "a b"},
            "RFT_REDIS_PREFIX='a b' is not a valid Redis key prefix: it must be 1-40 characters",
        ),
    ]
    for overrides, env, text in cases:
        proc = trinity_run(
            demo,
            *overrides,
            cwd=tmp_path,
            env={
                k: v
                for k, v in {**os.environ, "RFT_DEMO_DIR": str(tmp_path), **env}.items()
                if v is not None
            },
            timeout=300,
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert text in proc.stderr.strip().splitlines()[-1]
        assert not (tmp_path / "checkpoints").exists()  # refused before anything started


def test_a_roles_phase_is_streamed_when_it_or_its_step_changes_and_an_unknown_one_is_refused(
    tmp_path, redis_client, dashboard_run
):
    monitor = build_monitor(
        "tensorboard", {}, tmp_path, role="explorer", run_name="demo", stage="rft"
    )
    monitor.phase("eval", 0)
    monitor.phase("eval", 0)  # unchanged: not sent again
    monitor.phase("rollout", 1)
    monitor.phase("waiting", 1)
    monitor.phase("rollout", 2)
    monitor.phase("rollout", 3)  # the same phase at a new step: the page's step follows
    monitor.phase("rollout", 3)
    with pytest.raises(ValueError, match="phase 'sleeping' is not one of rollout, train, eval"):
        monitor.phase("sleeping")
    monitor.close()
    entries = redis_client.xrange(stream_key(dashboard_run))
    events = [MonitorEvent.from_fields(f) for _, f in entries]
    phases = [(e.data["phase"], e.step, e.stage) for e in events if e.kind == "phase"]
    assert phases == [
        ("eval", 0, "rft"),
        ("rollout", 1, "rft"),
        ("waiting", 1, "rft"),
        ("rollout", 2, "rft"),
        ("rollout", 3, "rft"),
    ]


def test_a_step_summary_line_names_the_key_metrics_and_the_steps_seconds():
    from rft_core.monitor.monitor import step_summary

    line = step_summary(
        {
            "actor/pg_loss": 0.123456,
            "rollout/reward/mean": 0.5,
            "rollout/accuracy/mean": 0.25,
            "actor/grad_norm": 3.0,
            "time/train_step": 1.25,
            "time/waiting": 0.5,
            "system/trainer/cpu_percent": 99.0,
            "response_length/mean": 40.0,
        }
    )
    # rewards, accuracies, losses, grad norm in that order; time/* summed; the rest left out
    assert line == (
        "rollout/reward/mean=0.5, rollout/accuracy/mean=0.25, actor/pg_loss=0.1235, "
        "actor/grad_norm=3, 1.8s"
    )
    assert step_summary({"x/y": 1.0}) == "1 metrics"
