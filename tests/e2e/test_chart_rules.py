"""The chart rules (issue 23, item 3) in Debian's chromium, on the page's own scripts (the
vendored Plotly, static/js/chart_rules.js and static/js/charts.js; no server): tick labels
with the decimals the range needs, a flat series drawn flat, smoothing only for a series with
enough points and the last raw value in the title, each stage's steps from its own 0 with the
whole run one click away and its stages as bands, a log y axis, hover with step, stage, wall
time and value, and a chart pinned to the top.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000


PAGE = '<html><body><div id="charts" style="width:900px"></div></body></html>'


def _with_chart_scripts(page):
    for script in (
        "static/vendor/plotly.min.js",
        "static/js/chart_rules.js",
        "static/js/charts.js",
    ):
        page.add_script_tag(path=str(ROOT / script))
    return page


@pytest.fixture
def chart_page(page):
    page.set_content(PAGE)
    return _with_chart_scripts(page)


def test_tick_formats_and_flat_series(chart_page):
    rules = chart_page.evaluate(
        """() => {
          const R = window.RFTChartRules;
          return {
            flat: R.yAxis([-0.0875, -0.0875 + 1e-17, -0.0875]),
            zero: R.yAxis([0, 0, 0]),
            unit: R.yAxis([0.1, 0.9]),
            tiny: R.yAxis([0.00012, 0.00031]),
            big: R.yAxis([12, 4800]),
            log: R.yAxis([0, 0.1, 10], true),
          };
        }"""
    )
    # flat: a range of +-5% around the value, 4 decimals (ticks ~0.0015 apart), drawn flat
    assert rules["flat"]["flat"] is True
    assert rules["flat"]["range"] == pytest.approx([-0.091875, -0.083125])
    assert rules["flat"]["tickformat"] == ".4~f"
    assert rules["zero"]["range"] == [-1, 1] and rules["zero"]["tickformat"] == ".2~f"
    assert rules["unit"] == {"type": "linear", "tickformat": ".2~f", "flat": False}
    assert rules["tiny"]["tickformat"] == ".3~e"
    assert rules["big"]["tickformat"] == ".0~f"
    assert rules["log"]["type"] == "log"


def test_a_flat_series_gets_short_tick_labels_and_a_flat_line(chart_page):
    labels = chart_page.evaluate(
        """() => {
          const C = window.RFTCharts;
          const b = new C.Board(document.getElementById("charts"), {xMode: "step", smoothing: 0.6});
          const n = 40, v = [];
          for (let i = 0; i < n; i++) v.push(-0.0875 + (i % 2 ? 1e-17 : 0));
          b.setData({"actor/kl_loss": [{id: "r", step: [...Array(n).keys()], value: v,
                     wall_time: v.map((_, i) => 1800000000 + i), stage: v.map(() => "")}]});
          const div = document.querySelector('.chart[data-metric="actor/kl_loss"]');
          const ticks = Array.from(div.querySelectorAll(".ytick text")).map((t) => t.textContent);
          return {ticks, smoothed: div.data[1].y};
        }"""
    )
    assert labels["ticks"], "no y ticks drawn"
    assert all(len(t.replace("\u2212", "-")) <= 7 for t in labels["ticks"]), labels["ticks"]
    values = [float(t.replace("\u2212", "-")) for t in labels["ticks"]]
    assert len(set(values)) == len(values) and min(values) <= -0.0875 <= max(values), values
    assert set(labels["smoothed"]) == {-0.0875}


def test_smoothing_skips_short_series_and_the_title_shows_the_last_raw_value(chart_page):
    got = chart_page.evaluate(
        """() => {
          const C = window.RFTCharts;
          const b = new C.Board(document.getElementById("charts"), {xMode: "step", smoothing: 0.6});
          const evals = [0.5, 0.62, 0.78, 0.89];
          const long = [];
          for (let i = 0; i < 30; i++) long.push(i < 29 ? 0.1 : 0.9);
          const series = (v) => [{id: "r", step: v.map((_, i) => i * 10), value: v,
                                  wall_time: v.map((_, i) => 1800000000 + i), stage: v.map(() => "rft")}];
          b.setData({"eval/x/accuracy/mean@1": series(evals), "rollout/reward/mean": series(long)});
          const ev = document.querySelector('.chart[data-metric="eval/x/accuracy/mean@1"]');
          const rw = document.querySelector('.chart[data-metric="rollout/reward/mean"]');
          return {
            evalSmoothed: ev.data[1].y, evalMode: ev.data[1].mode,
            evalTitle: ev.layout.title.text, rewardLast: rw.data[1].y[29],
            rewardTitle: rw.layout.title.text,
            hover: rw.data[1].hovertemplate, custom: rw.data[1].customdata[29],
          };
        }"""
    )
    # 4 points: drawn as they are, ending at the header's 0.89
    assert got["evalSmoothed"] == [0.5, 0.62, 0.78, 0.89] and got["evalMode"] == "lines+markers"
    assert "last 0.89 @30" in got["evalTitle"]
    # 30 points: smoothed, so the bold line lags the jump, and the title says where it is
    assert got["rewardLast"] < 0.9
    assert "last 0.9 @290" in got["rewardTitle"]
    assert "step %{customdata[0]}" in got["hover"] and "%{customdata[3]}" in got["hover"]
    assert got["custom"] == [290, "0.9", "rft", "2027-01-15 08:00:29 UTC"]


def test_each_stage_starts_at_0_the_whole_run_is_one_click_away_with_bands(chart_page):
    got = chart_page.evaluate(
        """() => {
          const C = window.RFTCharts;
          const t = new C.Timeline({start: 1800000000});
          const b = new C.Board(document.getElementById("charts"), {xMode: "stage", smoothing: 0});
          const stage = [], step = [], value = [], wall = [];
          for (let i = 1; i <= 300; i++) { stage.push("sft_warmup"); step.push(i); value.push(0); wall.push(1800000000 + i); }
          for (let i = 1; i <= 30; i++) { stage.push("rft"); step.push(i); value.push(i / 30); wall.push(1800000400 + i); }
          b.setData({"critic/rewards/mean": [{id: "r", timeline: t, step, value, wall_time: wall, stage}]});
          const div = () => document.querySelector('.chart[data-metric="critic/rewards/mean"]');
          const perStage = {x: div().data[1].x.slice(), stages: b.stageNames(), view: b.viewStage()};
          b.setXMode("step");
          const whole = {first: div().data[1].x[0], last: div().data[1].x[329],
                         bands: div().layout.shapes.map((s) => [s.type, s.x0, s.x1])};
          b.extend("critic/rewards/mean", "r", {step: [31], value: [1], wall_time: [1800000431], stage: ["rft"]});
          whole.grown = div().layout.shapes.map((s) => s.x1);
          b.setStage("sft_warmup"); b.setXMode("stage");
          const sft = div().data[1].x.length;
          b.setLogY(true);
          return {perStage, whole, sft, log: div().layout.yaxis.type};
        }"""
    )
    assert got["perStage"]["stages"] == ["sft_warmup", "rft"] and got["perStage"]["view"] == "rft"
    assert got["perStage"]["x"] == list(range(1, 31))  # GRPO on its own axis, from its 0
    assert (got["whole"]["first"], got["whole"]["last"]) == (1, 330)
    assert got["whole"]["bands"] == [["rect", 0, 300], ["rect", 300, 330]]
    assert got["whole"]["grown"] == [300, 331]  # a live point widens its stage's band
    assert got["sft"] == 300
    assert got["log"] == "log"


def test_a_pinned_chart_moves_to_the_top_and_back(chart_page):
    got = chart_page.evaluate(
        """() => {
          const C = window.RFTCharts;
          const b = new C.Board(document.getElementById("charts"), {xMode: "step"});
          const s = (v) => [{id: "r", step: [1, 2], value: v, wall_time: [1, 2], stage: ["", ""]}];
          b.setData({"rollout/reward/mean": s([1, 2]), "actor/pg_loss": s([3, 4])});
          const xticks = Array.from(document.querySelectorAll('.chart[data-metric="actor/pg_loss"] .xtick text')).map((t) => t.textContent);
          const where = (m) => document.querySelector(`.chart[data-metric="${m}"]`).closest("section").dataset.group;
          document.querySelector('button.pin[data-metric="actor/pg_loss"]').click();
          const pinned = {group: where("actor/pg_loss"),
                          first: document.querySelector("#charts > section").dataset.group};
          document.querySelector('button.pin[data-metric="actor/pg_loss"]').click();
          return {pinned, xticks, back: where("actor/pg_loss"),
                  pinnedHidden: document.querySelector('section[data-group="pinned"]').hidden};
        }"""
    )
    assert got["pinned"] == {"group": "pinned", "first": "pinned"}
    assert got["xticks"] == ["1", "2"]  # a step per tick on a short axis, never "1, 2, 2"
    assert got["back"] == "loss" and got["pinnedHidden"] is True


def test_a_pinned_group_moves_to_the_top_with_its_charts_and_is_remembered(page):
    # an origin of its own, so that localStorage (where pins are remembered) exists
    page.route(
        "http://charts.test/",
        lambda route: route.fulfill(content_type="text/html", body=PAGE),
    )
    page.goto("http://charts.test/")
    _with_chart_scripts(page)
    board = """(el) => {
      const s = (v) => [{id: "r", step: [1, 2], value: v, wall_time: [1, 2], stage: ["", ""]}];
      const b = new window.RFTCharts.Board(el, {xMode: "step"});
      b.setData({"rollout/reward/mean": s([1, 2]), "actor/pg_loss": s([3, 4]),
                 "actor/kl_loss": s([5, 6]), "actor/ppo_kl": s([0, 1])});
      return b;
    }"""
    order = """() => Array.from(document.querySelectorAll("#charts > section"))
                 .filter((sec) => !sec.hidden).map((sec) => sec.dataset.group)"""
    got = page.evaluate(
        f"""() => {{
          const el = document.getElementById("charts");
          ({board})(el);
          const order = {order};
          const before = order();
          const button = document.querySelector('button.pin-group[data-group="loss"]');
          button.click();
          const pinned = {{order: order(), label: button.textContent,
                          pressed: button.getAttribute("aria-pressed"),
                          charts: Array.from(document.querySelectorAll(
                            'section[data-group="loss"] .chart')).map((c) => c.dataset.metric)}};
          // a chart pinned on its own goes above the pinned group
          document.querySelector('button.pin[data-metric="actor/ppo_kl"]').click();
          const both = order();
          document.querySelector('button.pin[data-metric="actor/ppo_kl"]').click();
          return {{before, pinned, both}};
        }}"""
    )
    assert got["before"] == ["reward", "loss", "kl"]
    assert got["pinned"] == {
        "order": ["loss", "reward", "kl"],
        "label": "Unpin group",
        "pressed": "true",
        "charts": ["actor/kl_loss", "actor/pg_loss"],
    }
    assert got["both"] == ["pinned", "loss", "reward"]
    # the next page load (a new board) remembers the pinned group; unpinning puts it back
    again = page.evaluate(
        f"""() => {{
          const el = document.getElementById("charts");
          el.innerHTML = "";
          const b = ({board})(el);
          const order = {order};
          const remembered = order();
          b.pinGroup("loss", false);
          return {{remembered, unpinned: order(),
                   stored: window.localStorage.getItem("rft.pinned-chart-groups")}};
        }}"""
    )
    assert again == {
        "remembered": ["loss", "reward", "kl"],
        "unpinned": ["reward", "loss", "kl"],
        "stored": "[]",
    }
