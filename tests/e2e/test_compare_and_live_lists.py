"""In Debian's chromium against a real daphne (+ Redis): the compare page overlays two runs'
seeded metric points (two traces per chart, the smoothing slider changes the smoothed ones),
fits a 1,400 px window with a run of 450 SFT + 40 GRPO steps and its fork (the summary scrolls
in its own box, steps per stage, a few tick labels on a step axis),
and the experiment list's last-run badge changes when a runs action publishes the run's new
state (``observe_status`` in a process of the site's own, as the ingestor would), without a
reload."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.browser

SEED = """
import json
from django.contrib.auth import get_user_model
from webapp.experiments.models import Experiment
from webapp.runs.models import MetricPoint, Run
owner = get_user_model().objects.get(username={username!r})
e = Experiment.objects.create(owner=owner, name={name!r}, config_yaml='', config={{}})
runs = [Run.objects.create(experiment=e, number=n, status={status!r},
                          config_yaml='algorithm:\\n  optimizer:\\n    lr: %s\\n' % (n * 1e-5))
        for n in (1, 2)]
e.last_run = runs[-1]
e.save(update_fields=['last_run'])
for k, run in enumerate(runs):
    MetricPoint.objects.bulk_create(
        MetricPoint(run=run, name=name, role='explorer', stage='rft', step=s, wall_time=1e9 + s,
                    value=(s % 5) * (k + 1) + (0.5 if 'accuracy' in name else 0.0))
        for name in ('rollout/reward/mean', 'eval/gsm8k/accuracy/mean@1', 'actor/pg_loss')
        for s in range(1, 31))
print(json.dumps({{'experiment': e.pk, 'runs': [r.pk for r in runs]}}))
"""

OBSERVE = """
from webapp.runs import actions
from webapp.runs.models import Run
run = Run.objects.get(pk={pk})
actions.observe_status(run, 'running', '', 1.7e9)
print(Run.objects.get(pk={pk}).status)
"""


def _seed(live_site, name: str, status: str = "succeeded") -> dict:
    code = SEED.format(username=live_site.username, name=name, status=status)
    return json.loads(live_site.manage("shell", "-c", code).stdout.strip().splitlines()[-1])


def _smoothed_y(page, chart: str) -> dict[str, list[float]]:
    """The smoothed trace's y values by trace name (the run's label)."""
    return dict(
        page.evaluate(
            """(sel) => document.querySelector(sel).data
                  .filter(t => t.meta && t.meta.kind === 'smoothed').map(t => [t.name, t.y])""",
            chart,
        )
    )


def test_the_compare_page_overlays_two_runs_and_the_slider_smooths_them(logged_in_page, live_site):
    page = logged_in_page
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    seeded = _seed(live_site, "compare-e2e")
    one, two = seeded["runs"]
    # picked from the experiment's run list: tick both, Compare
    page.goto(f"{live_site.url}/experiments/{seeded['experiment']}/")
    page.check(f"input.compare-pick[value='{one}']")
    page.check(f"input.compare-pick[value='{two}']")
    page.click("#compare")
    page.wait_for_url("**/runs/compare/?ids=*")
    assert sorted(page.url.split("ids=")[1].split("%2C")) == sorted([str(one), str(two)])
    reward = ".chart[data-metric='rollout/reward/mean']"
    page.wait_for_selector(f"{reward} .main-svg")
    charts = page.eval_on_selector_all(
        ".chart:not([hidden])", "cs => cs.map(c => c.dataset.metric)"
    )
    assert sorted(charts) == ["eval/gsm8k/accuracy/mean@1", "rollout/reward/mean"]  # default group
    for metric in charts:
        chart = f".chart[data-metric='{metric}']"
        traces = page.evaluate(
            "(sel) => document.querySelector(sel).data.map(t => [t.name, t.meta.kind, t.type])",
            chart,
        )
        smoothed = [name for name, kind, _ in traces if kind == "smoothed"]
        assert sorted(smoothed) == ["compare-e2e #1", "compare-e2e #2"], traces  # one per run
        assert {t for _, _, t in traces} == {"scatter"}  # SVG, never scattergl
        colours = page.evaluate(
            """(sel) => document.querySelector(sel).data
                  .filter(t => t.meta.kind === 'smoothed').map(t => t.line.color)""",
            chart,
        )
        assert len(set(colours)) == 2
    assert page.locator(f"{reward} .legend").count() == 1  # the legend names the runs
    before = _smoothed_y(page, reward)
    page.fill("#smoothing", "0")
    page.dispatch_event("#smoothing", "input")
    raw0 = _smoothed_y(page, reward)
    assert raw0 != before
    assert raw0["compare-e2e #1"][:5] == [1, 2, 3, 4, 0]  # no smoothing: run 1's raw values
    assert raw0["compare-e2e #2"][:5] == [2, 4, 6, 8, 0]
    page.fill("#smoothing", "0.9")
    page.dispatch_event("#smoothing", "input")
    assert _smoothed_y(page, reward) not in (before, raw0)
    # the picker adds a metric: fetched and drawn with both runs
    page.click(".picker-box summary")
    page.check("input[data-metric='actor/pg_loss']")
    page.wait_for_selector(".chart[data-metric='actor/pg_loss'] .main-svg")
    assert len(_smoothed_y(page, ".chart[data-metric='actor/pg_loss']")) == 2
    assert page.locator("table.compare, p.same").count() == 1  # beside the config differences
    # the summary: run 2 holds the best reward and accuracy (its values are twice run 1's)
    assert page.locator(f"#compare-summary tr[data-run-id='{two}'] td.best").count() == 2
    assert page.locator(f"#compare-summary tr[data-run-id='{one}'] td.best").count() == 0
    # the parallel-coordinates chart: the lr that differs, then the two key metrics
    page.wait_for_selector("#parallel-coordinates .main-svg")
    axes = page.evaluate(
        "() => document.querySelector('#parallel-coordinates').data[0].dimensions.map(d => d.label)"
    )
    assert axes == ["algorithm.optimizer.lr", "eval/gsm8k/accuracy/mean@1", "rollout/reward/mean"]
    assert errors == []


FORK_SEED = """
import json
from django.contrib.auth import get_user_model
from webapp.experiments.models import Experiment
from webapp.runs.models import MetricPoint, Run
owner = get_user_model().objects.get(username={username!r})
e = Experiment.objects.create(owner=owner, name='sft-then-grpo', config_yaml='', config={{}})
parent = Run.objects.create(experiment=e, number=1, status='succeeded', config_yaml='name: a\\n')
fork = Run.objects.create(experiment=e, number=2, status='succeeded', config_yaml='name: b\\n',
                          parent=parent, fork_stage='rft', fork_step=20)
names = {names!r}
points = [MetricPoint(run=parent, name='actor/sft_loss', role='trainer', stage='sft_warmup',
                      step=s, wall_time=1e9 + s, value=1.0 / s) for s in range(1, 451)]
for run, first in ((parent, 1), (fork, 21)):
    points += [MetricPoint(run=run, name=name, role='explorer', stage='rft', step=s,
                           wall_time=1e9 + 1000 + s, value=0.123456 * (k + 1) + s / 1000)
               for k, name in enumerate(names) for s in range(first, 41)]
MetricPoint.objects.bulk_create(points)
print(json.dumps({{'runs': [parent.pk, fork.pk]}}))
"""
# eight key metrics (the summary's MAX_COLUMNS) with long names, as a GRPO run with evals logs
KEY_METRICS = [
    "rollout/reward/mean",
    "rollout/reward/std",
    "rollout/reward/max",
    "rollout/reward/min",
    "eval/arithmetic-eval/accuracy/mean@1",
    "eval/arithmetic-eval/accuracy/best@4",
    "eval/gsm8k-test-split/accuracy/mean@4",
    "eval/gsm8k-test-split/accuracy/worst@4",
]


def test_the_compare_page_fits_a_1400_px_window_with_steps_per_stage_and_readable_ticks(
    logged_in_page, live_site
):
    page = logged_in_page
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_viewport_size({"width": 1400, "height": 900})
    code = FORK_SEED.format(username=live_site.username, names=KEY_METRICS)
    seeded = json.loads(live_site.manage("shell", "-c", code).stdout.strip().splitlines()[-1])
    parent, fork = seeded["runs"]
    page.goto(f"{live_site.url}/runs/compare/?ids={parent},{fork}")
    reward = ".chart[data-metric='rollout/reward/mean']"
    page.wait_for_selector(f"{reward} .main-svg")
    # the document is no wider than the window: the wide summary scrolls in a box of its own
    widths = page.evaluate(
        """() => ({doc: document.documentElement.scrollWidth, window: window.innerWidth,
                   box: document.getElementById('compare-summary-scroll').clientWidth,
                   overflow: getComputedStyle(document.getElementById('compare-summary-scroll')).overflowX})"""
    )
    assert widths["doc"] <= widths["window"] == 1400, widths
    assert widths["box"] <= 1400 and widths["overflow"] == "auto", widths
    assert page.locator("#compare-summary-scroll > #compare-summary").count() == 1
    headers = page.locator("#compare-summary th.metric")
    assert headers.count() == 8
    assert sorted(headers.evaluate_all("hs => hs.map(h => h.title)")) == sorted(KEY_METRICS)
    # steps per stage: the parent's SFT and GRPO steps apart, the fork's GRPO steps alone
    steps = page.eval_on_selector_all(
        "#compare-summary tbody tr",
        "rs => rs.map(r => [r.dataset.runId, Array.from(r.querySelectorAll('.stage-steps')).map(s => s.textContent)])",
    )
    assert dict(steps) == {str(parent): ["sft_warmup 450", "rft 40"], str(fork): ["rft 40"]}
    # "step (whole run)": a few whole-number tick labels, not one per step
    assert page.locator("#x-mode").input_value() == "step"
    page.click(".picker-box summary")
    page.check("input[data-metric='actor/sft_loss']")
    loss = ".chart[data-metric='actor/sft_loss']"
    page.wait_for_selector(f"{loss} .main-svg")
    # the parent's GRPO steps come after its 450 SFT steps, whichever metric loaded first
    first_x = page.evaluate(
        """(sel) => document.querySelector(sel).data
              .filter(t => t.name === 'sft-then-grpo #1').map(t => Math.min(...t.x))""",
        reward,
    )
    assert first_x and set(first_x) == {451}, first_x
    for chart in (reward, loss):
        ticks = page.eval_on_selector_all(
            f"{chart} .xtick text", "ts => ts.map(t => t.textContent.replace(/[^0-9-]/g, ''))"
        )
        assert 2 <= len(ticks) <= 9, (chart, ticks)
        values = [int(t) for t in ticks]
        assert values == sorted(set(values)), (chart, ticks)
    assert errors == []


def test_the_experiment_list_badge_follows_a_status_change_without_a_reload(
    logged_in_page, live_site
):
    page = logged_in_page
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    seeded = _seed(live_site, "live-list-e2e", status="starting")
    run = seeded["runs"][-1]
    page.goto(f"{live_site.url}/experiments/?q=live-list-e2e")
    badge = page.locator(f"tr[data-experiment-id='{seeded['experiment']}'] .status")
    assert badge.inner_text() == "#2 starting"
    page.wait_for_selector("body[data-live-lists='open']")
    page.evaluate("window.__notReloaded = true")
    out = live_site.manage("shell", "-c", OBSERVE.format(pk=run)).stdout.strip()
    assert out.endswith("running")
    page.wait_for_function(
        "(sel) => document.querySelector(sel).textContent.trim() === '#2 running'",
        arg=f"tr[data-experiment-id='{seeded['experiment']}'] .status",
    )
    assert "running" in badge.get_attribute("class").split()
    assert page.evaluate("window.__notReloaded") is True  # the same document: no reload
    assert errors == []


NEW_RUN = """
from webapp.experiments.models import Experiment
from webapp.runs.live import publish_run
from webapp.runs.models import Run
from django.db import transaction
e = Experiment.objects.get(pk={pk})
with transaction.atomic():
    run = Run.objects.create(experiment=e, number=3, config_yaml='', status='queued')
    publish_run(run)
print(run.pk)
"""


def test_an_experiments_run_list_follows_its_runs_and_shows_a_new_one_without_a_reload(
    logged_in_page, live_site
):
    page = logged_in_page
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    seeded = _seed(live_site, "live-runs-e2e", status="starting")
    run = seeded["runs"][-1]
    page.goto(f"{live_site.url}/experiments/{seeded['experiment']}/")
    page.wait_for_selector("body[data-live-lists='open']")
    page.evaluate("window.__notReloaded = true")
    status = f"tr[data-run-id='{run}'] [data-field='status']"
    assert page.inner_text(status) == "starting"
    live_site.manage("shell", "-c", OBSERVE.format(pk=run))
    page.wait_for_function(
        "(sel) => document.querySelector(sel).textContent.trim() === 'running'", arg=status
    )
    assert page.inner_text(f"tr[data-run-id='{run}'] [data-field='duration']").startswith("running")
    new = int(
        live_site.manage("shell", "-c", NEW_RUN.format(pk=seeded["experiment"])).stdout.split()[-1]
    )
    page.wait_for_selector(f"tr[data-run-id='{new}']")
    numbers = page.eval_on_selector_all("tr[data-run-id]", "rs => rs.map(r => r.dataset.runNumber)")
    assert numbers == ["3", "2", "1"]  # newest first, as the page lists them
    assert page.inner_text(f"tr[data-run-id='{new}'] [data-field='status']") == "queued"
    assert page.evaluate("window.__notReloaded") is True
    assert errors == []
