"""A run's progress through its stages (issue 23, item 1): the step counters of the current
stage, the fractions per stage and for the run, the ETA from the recent step rate and the
phase its roles report, computed by ``webapp.runs.progress`` and kept by the ingestor's
projection from real monitor events (``store_events``, as the ingestor stores a batch), and
served by the run API.

A config of the demo's shape (``examples/demo/grpo_demo.yaml`` when issue 31 was filed): an SFT
stage of 450 steps, then the GRPO stage ``rft`` of 30.
"""

from __future__ import annotations

import pytest
from demo_rows import make_experiment, make_run

from rft_core.monitor.events import MonitorEvent
from webapp.ingest.store import rows_of, store_events
from webapp.runs import progress
from webapp.runs.models import RunStatus

T0 = 1_800_000_000.0
DEMO_PLAN = [{"name": "sft_warmup", "total_steps": 450}, {"name": "rft", "total_steps": 30}]


# ------------------------------------------------------------------ pure rules


def test_the_plan_of_the_demo_config_is_its_stages_with_their_own_totals():
    config = {
        "buffer": {"total_steps": 30},
        "stages": [
            {"stage_name": "sft_warmup", "buffer": {"total_steps": 450}},
            {"stage_name": "rft"},
            {"stage_name": "by_epochs", "buffer": {"total_epochs": 2}},
        ],
    }
    assert progress.stage_plan(config) == [
        {"name": "sft_warmup", "total_steps": 450},
        {"name": "rft", "total_steps": 30},
        {"name": "by_epochs", "total_steps": None},
    ]
    assert progress.stage_plan({"buffer": {"total_steps": 8}}) == [{"name": "", "total_steps": 8}]


def test_the_rate_is_taken_over_the_newest_steps_only():
    times: list = []
    # 20 slow steps (10 s each), then 20 fast ones (2 s each): the window holds the fast ones
    t = T0
    for step in range(1, 21):
        t += 10
        times = progress.note_step(times, t, step)
    for step in range(21, 41):
        t += 2
        times = progress.note_step(times, t, step)
    assert len(times) == progress.STEP_WINDOW + 1  # the stage's first step, the newest 20
    assert times[0] == [T0 + 10, 1]
    # window: steps 21..40 at t0+202 .. t0+240: 19 steps in 38 s
    assert progress.step_rate(times) == pytest.approx(0.5)
    assert progress.note_step(times, t + 5, 40) == times  # a step seen already adds nothing


def test_the_eta_is_the_remaining_steps_at_the_recent_rate_counting_down_between_steps():
    times = [[T0, 10], [T0 + 20, 20]]  # 0.5 steps/s
    # 10 steps left of 30 -> 20 s after the newest step; 5 s later, 15 s
    assert progress.eta_seconds(times, 20, 30, now=T0 + 20) == pytest.approx(20.0)
    assert progress.eta_seconds(times, 20, 30, now=T0 + 25) == pytest.approx(15.0)
    assert progress.eta_seconds(times, 20, 30, now=T0 + 99) == 0.0  # late: never negative
    assert progress.eta_seconds(times[:1], 10, 30, now=T0) is None  # one step: no rate
    assert progress.eta_seconds(times, 20, None, now=T0 + 20) is None  # by epochs: no total


def _slowing_stage() -> list[float]:
    """The finishing time of each step of a 450-step SFT stage (issue 31's): 2.4 s a step for
    its first 20 steps, then the machine gets busy and steps take 4 s, with a 20 s checkpoint
    every 50 steps (the stage took 29m47s; an ETA from its first steps said 17m50s)."""
    t, ends = T0, []
    for step in range(1, 451):
        t += 2.4 if step <= 20 else 4.0
        if step % 50 == 0:
            t += 20.0
        ends.append(t)
    return ends


def test_the_eta_stays_within_a_quarter_of_the_truth_and_says_the_machine_is_busy():
    ends = _slowing_stage()
    times: list = []
    busy_at = []
    for step, t in enumerate(ends, start=1):
        times = progress.note_step(times, t, step)
        if step < 45:  # 10% of the stage
            continue
        eta = progress.eta_seconds(times, step, 450, now=t)
        truth = ends[-1] - t
        # while a tenth of the stage is left (in the last few steps one checkpoint's 20 s is
        # more than a quarter of what remains, and the countdown is seconds anyway)
        if step <= 405:
            assert abs(eta - truth) <= 0.25 * truth, (step, eta, truth)
        if progress.machine_busy(times):
            busy_at.append(step)
    # steps 21.. run 1.67x slower than the first 20: busy once the window holds slow steps only
    # and the earlier part still shows the fast start (the stage's rate, not the window's)
    assert busy_at and busy_at[0] == 45, busy_at[:3]
    at_60: list = []
    for step, t in enumerate(ends[:60], start=1):
        at_60 = progress.note_step(at_60, t, step)
    state = progress.progress(
        plan=DEMO_PLAN, stage="sft_warmup", step=60, total_steps=450, step_times=at_60,
        phases={}, active=True, succeeded=False, now=ends[59],
    )  # fmt: skip
    assert state["machine_busy"] is True


def test_a_steady_stage_is_not_busy():
    times: list = []
    for step in range(1, 100):
        times = progress.note_step(times, T0 + 3.0 * step, step)
    assert progress.machine_busy(times) is False
    assert progress.eta_seconds(times, 99, 450, now=T0 + 297) == pytest.approx(351 * 3.0)


def test_a_roles_phase_keeps_its_start_across_steps_and_checkpoints():
    p = progress.role_phase(None, "train", 1, T0)
    p = progress.role_phase(p, "train", 2, T0 + 4)  # the next step: the step follows
    assert p == {"phase": "train", "step": 2, "since": T0}
    p = progress.role_phase(p, "checkpoint", 2, T0 + 8)
    assert (p["phase"], p["since"]) == ("checkpoint", T0 + 8)
    p = progress.role_phase(p, "train", 3, T0 + 30)  # back from the save: training's own start
    assert p == {"phase": "train", "step": 3, "since": T0}
    p = progress.role_phase(p, "waiting", 3, T0 + 40)
    assert p["since"] == T0 + 40


def test_the_phase_of_the_run_is_the_one_that_holds_it_up():
    assert progress.current_phase({}) is None
    both = {"explorer": {"phase": "rollout"}, "trainer": {"phase": "waiting"}}
    assert progress.current_phase(both) == "rollout"
    both["explorer"]["phase"] = "eval"
    assert progress.current_phase(both) == "eval"
    assert (
        progress.current_phase({"explorer": {"phase": "waiting"}, "trainer": {"phase": "train"}})
        == "train"
    )


def test_in_the_grpo_stage_the_counters_are_the_stages_and_the_run_fraction_weighs_both():
    got = progress.progress(
        plan=DEMO_PLAN,
        stage="rft",
        step=12,
        total_steps=30,
        step_times=[[T0, 2], [T0 + 50, 12]],  # 0.2 steps/s
        phases={"explorer": {"phase": "rollout"}},
        active=True,
        succeeded=False,
        now=T0 + 50,
    )
    assert (got["stage_index"], got["stage_count"]) == (1, 2)
    assert (got["stage_step"], got["stage_total_steps"]) == (12, 30)
    assert got["stage_fraction"] == pytest.approx(0.4)
    # (450 * 1 + 30 * 0.4) / 480
    assert got["run_fraction"] == pytest.approx(462 / 480)
    assert got["stage_eta_s"] == pytest.approx(90.0)  # 18 steps at 0.2/s
    assert got["run_eta_s"] == got["stage_eta_s"]  # the last stage
    assert got["phase"] == "rollout"
    assert [s["fraction"] for s in got["stages"]] == [1.0, pytest.approx(0.4)]


def test_in_the_sft_stage_the_run_has_no_eta_yet_and_a_finished_run_has_none():
    sft = progress.progress(
        plan=DEMO_PLAN, stage="sft_warmup", step=90, total_steps=450,
        step_times=[[T0, 80], [T0 + 10, 90]], phases={"trainer": {"phase": "train"}},
        active=True, succeeded=False, now=T0 + 10,
    )  # fmt: skip
    assert sft["stage_eta_s"] == pytest.approx(360.0)  # 360 steps at 1/s
    assert sft["run_eta_s"] is None  # GRPO's rate is not known yet
    assert sft["run_fraction"] == pytest.approx(90 / 480)
    done = progress.progress(
        plan=DEMO_PLAN, stage="rft", step=30, total_steps=30, step_times=[[T0, 1], [T0 + 9, 30]],
        phases={"explorer": {"phase": "eval"}}, active=False, succeeded=True, now=T0 + 100,
    )  # fmt: skip
    assert (done["run_fraction"], done["stage_eta_s"], done["phase"]) == (1.0, None, None)


# ------------------------------------------------------------------ from the event stream


def _store(run, events: list[MonitorEvent]) -> None:
    """One batch, as the ingestor stores it (stream ids from the events' times)."""
    rows = rows_of(run.key, [(f"{int(e.ts * 1000)}-{i}", e) for i, e in enumerate(events)])
    store_events(run.key, rows)


def _event(run, kind, role, stage, step, ts, data):
    return MonitorEvent(run.key, kind, role, step=step, data=data, ts=ts, stage=stage)


@pytest.mark.django_db
def test_the_grpo_stage_counts_its_own_steps_after_the_sft_stage(alice):
    run = make_run(make_experiment(alice), status=RunStatus.STARTING)
    ev = []
    ev.append(_event(run, "status", "trainer", "sft_warmup", None, T0, {"state": "running"}))
    for step in range(1, 301):
        ev.append(_event(run, "metric", "trainer", "sft_warmup", step, T0 + step, {"loss": 1.0}))
    # the GRPO stage's roles start (the status that once carried step 300 over), then step
    ev.append(_event(run, "status", "explorer", "rft", None, T0 + 400, {"state": "running"}))
    ev.append(_event(run, "phase", "explorer", "rft", 0, T0 + 400, {"phase": "eval"}))
    _store(run, ev)
    run.refresh_from_db()
    assert (run.stage, run.step, run.total_steps) == ("rft", None, 30)
    assert run.phases["explorer"]["phase"] == "eval"

    ev = []
    for step in range(1, 13):  # a GRPO step every 5 s
        t = T0 + 500 + 5 * step
        ev.append(_event(run, "phase", "explorer", "rft", step, t - 4, {"phase": "rollout"}))
        ev.append(_event(run, "metric", "explorer", "rft", step, t, {"rollout/reward/mean": 0.5}))
    # a late SFT metric changes nothing: the run has left that stage
    ev.append(_event(run, "metric", "trainer", "sft_warmup", 450, T0 + 561, {"loss": 1.0}))
    _store(run, ev)
    run.refresh_from_db()
    assert (run.stage, run.step, run.total_steps) == ("rft", 12, 30)
    got = progress.progress_of(run, now=T0 + 560)
    assert (got["stage_step"], got["stage_total_steps"], got["stage_index"]) == (12, 30, 1)
    assert got["phase"] == "rollout"
    assert got["step_rate"] == pytest.approx(0.2)
    assert got["stage_eta_s"] == pytest.approx(18 / 0.2)


@pytest.mark.django_db
def test_the_run_api_gives_the_stage_counters(client, alice):
    run = make_run(make_experiment(alice), status=RunStatus.RUNNING)
    _store(
        run,
        [_event(run, "metric", "explorer", "rft", s, T0 + 3 * s, {"x": 1.0}) for s in (1, 2, 3)]
        + [_event(run, "phase", "explorer", "rft", 3, T0 + 10, {"phase": "eval"})],
    )
    client.force_login(alice)
    body = client.get(f"/api/v1/runs/{run.pk}/").json()
    assert (body["stage"], body["stage_step"], body["stage_total_steps"]) == ("rft", 3, 30)
    assert (body["step"], body["stage_index"], body["stage_count"]) == (3, 1, 2)
    assert body["phase"] == "eval"
    assert body["step_rate"] == pytest.approx(1 / 3)
    live = client.get(f"/runs/{run.pk}/live.json").json()["run"]
    assert (live["stage_step"], live["stage_total_steps"], live["phase"]) == (3, 30, "eval")


# ------------------------------------------------------------------ the smaller items


def test_checkpoints_come_in_the_order_the_run_made_them():
    class Ckpt:
        def __init__(self, stage, step):
            self.stage, self.step = stage, step

    config = {"stages": [{"stage_name": "sft_warmup"}, {"stage_name": "rft"}]}
    rows = [Ckpt("rft", 20), Ckpt("sft_warmup", 450), Ckpt("rft", 10), Ckpt("sft_warmup", 90)]
    got = [(c.stage, c.step) for c in progress.in_stage_order(config, rows)]
    # alphabetically rft would come first; the run made sft_warmup first
    assert got == [("sft_warmup", 90), ("sft_warmup", 450), ("rft", 10), ("rft", 20)]


@pytest.mark.django_db
def test_the_experiment_list_puts_a_running_experiment_first_whatever_the_sort(client, alice):
    finished = make_experiment(alice, name="a finished one")
    running = make_experiment(alice, name="z running one")
    idle = make_experiment(alice, name="b never run")
    finished.last_run = make_run(finished, status=RunStatus.SUCCEEDED)
    finished.save()
    running.last_run = make_run(running, status=RunStatus.RUNNING)
    running.save()
    client.force_login(alice)
    for sort in ("name", "updated", "created", "accuracy"):
        page = client.get(f"/experiments/?sort={sort}").content.decode()
        at = {e.name: page.index(e.name) for e in (finished, running, idle)}
        assert at["z running one"] < min(at["a finished one"], at["b never run"]), sort
    page = client.get("/experiments/?sort=name").content.decode()
    assert page.index("a finished one") < page.index("b never run")  # then by name
