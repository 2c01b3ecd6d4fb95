"""``trinity run`` with ``RAY_ADDRESS`` pointing at a Ray head that is not the run's own: the
launch path of a GPU node (README "Running on an existing Ray cluster of GPU nodes"), on CPU.

The head is a real ``ray start --head`` started by the session's ``ray_head`` fixture
(tests/conftest.py: its own ports and temp dir, 2 CPUs). The run is the demo cut to its bones (its
GRPO part only: 2 steps of 2 tasks x 2 samples, no eval), so it stays
cheap on a 2-core CI machine. That the run used that head, and not a Ray of its own, is read
from the head itself: its job server lists the run's driver (a ``DRIVER`` job whose entrypoint is
the ``trinity run`` command) once it has finished; and the CLI's summary names the address."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import yaml
from run_configs import trinity_run

from rft_core.demo import build_demo

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "demo" / "grpo_demo.yaml"


def cheap_demo_config(tmp_path: Path) -> Path:
    data = yaml.safe_load(DEMO.read_text())
    data["name"] = "via_ray_address"
    data["algorithm"]["repeat_times"] = 2
    data["buffer"].update(batch_size=2, total_steps=2)
    data["buffer"]["explorer_input"]["eval_tasksets"] = []
    data["explorer"]["eval_on_startup"] = False
    data["trainer"]["save_interval"] = 0
    del data["stages"]  # the GRPO part only: one stage's actors
    data["monitor"] = {"monitor_type": "none"}
    path = tmp_path / "cheap_demo.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_trinity_run_joins_the_cluster_ray_address_names(ray_head, tmp_path):
    demo = build_demo(tmp_path / "demo")
    config = cheap_demo_config(tmp_path)
    address = f"127.0.0.1:{ray_head.gcs_port}"  # the head's GCS, as a driver joins it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRINITY_", "RAY_"))}
    env.update(
        RAY_ADDRESS=address,
        # Ray 2.60's heads use token auth: a driver that joins one says so (the token is
        # ~/.ray/auth_token, which the head wrote; README "Runs started outside the dashboard")
        RAY_AUTH_MODE="token",
        RFT_DEMO_DIR=str(demo.root),
        TRINITY_CHECKPOINT_ROOT_DIR=str(tmp_path / "checkpoints"),
        OMP_NUM_THREADS="1",
    )
    proc = trinity_run(
        config,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    # the summary line of each stage names the cluster it ran on
    (line,) = proc.stdout.strip().splitlines()
    assert line.startswith("via_ray_address: mode both, 2 explorer steps, 2 trainer steps"), line
    assert line.endswith(f"Ray cluster {address}"), line
    assert (tmp_path / "checkpoints" / "demo" / "via_ray_address" / "global_step_2").is_dir()
    # the head's job server lists this run's driver: it ran in that cluster
    from webapp.health.checks import ray_auth_headers  # the token Ray's own clients send

    url = f"http://127.0.0.1:{ray_head.dashboard_port}/api/jobs/"
    request = urllib.request.Request(url, headers=ray_auth_headers())
    with urllib.request.urlopen(request, timeout=30) as answer:
        jobs = json.load(answer)
    drivers = [
        j for j in jobs if j.get("type") == "DRIVER" and str(config) in (j.get("entrypoint") or "")
    ]
    assert len(drivers) == 1, [(j.get("type"), j.get("entrypoint")) for j in jobs]
    assert drivers[0]["status"] == "SUCCEEDED"
