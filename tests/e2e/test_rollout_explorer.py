"""Issue 23 item 4's browser proof: the rollout explorer in Debian's chromium, on the whole stack
really started (daphne, a Celery worker, the event ingestor, a Ray head, Redis, one database;
the ``stack`` fixture). A user pastes the demo config into the form's YAML tab, shortened (2 SFT
steps, then 3 GRPO steps of 4 tasks x 4 samples, no evaluation), with
``monitor.rollout_samples_per_step: 8`` (each GRPO step keeps its first two task groups) and
``math_dapo_reward`` with its overlong penalty as the reward: after 2 SFT steps no answer is
right, and the penalty (length beyond 4 tokens) makes the rewards differ, so that a sort by
reward or advantage has something to order.
Once the run has succeeded, the explorer (opened from the run page's link) lists every GRPO step
with its 8 rollouts (the picker's values are the step numbers), shows a step as step -> task
group (foldable, headed by the mean and spread of its rewards) -> rollout, every step the same
way, newest first, sorts by reward and by advantage, searches, and
opens a rollout's token view: one span per response token, coloured by its sampling log-prob,
with the trainer's log-prob of it and their difference (coloured by it on request).

Every request to another host is aborted and fails the test, as does a browser console error.
Screenshots go to the test's tmp dir and ``$RFT_ARTIFACTS_DIR`` when it is set.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.e2e.live_page import guarded_page, keep_screenshot, log_in, wait_page

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
RFT_STEPS = 3
KEPT = 8  # monitor.rollout_samples_per_step: two groups of repeat_times 4

ROLLOUTS_JS = """() => Array.from(document.querySelectorAll("#rollout-list .rollout")).map((a) => ({
  reward: a.dataset.reward === "" ? null : Number(a.dataset.reward),
  advantage: a.dataset.advantage === "" ? null : Number(a.dataset.advantage),
  group: a.closest(".rollout-group") ? a.closest(".rollout-group").dataset.group : null,
}))"""


def test_the_rollout_explorer_sorts_searches_and_shows_token_logprobs(
    browser, stack, tmp_path: Path
):
    shots = tmp_path / "screenshots"
    shots.mkdir()
    guarded = guarded_page(browser, stack.url)
    try:
        _run_the_demo(guarded.page, stack)
        _explore(guarded.page, stack, shots)
    finally:
        guarded.context.close()
    guarded.check()


def _demo_yaml() -> str:
    """The demo config as a user edits it in the YAML tab (see the module docstring)."""
    text = (ROOT / "examples" / "demo" / "grpo_demo.yaml").read_text()
    for old, new in [
        ("  batch_size: 8\n  total_steps: 30\n", f"  batch_size: 4\n  total_steps: {RFT_STEPS}\n"),
        ("  repeat_times: 8\n", "  repeat_times: 4\n"),
        (
            "  eval_interval: 10\n  eval_on_startup: true\n",
            "  eval_interval: 1000\n  eval_on_startup: false\n",
        ),
        ("  save_interval: 10\n", "  save_interval: 0\n"),
        (
            "      train_batch_size: 8\n      total_steps: 500\n",
            "      train_batch_size: 8\n      total_steps: 2\n",
        ),
        (
            "      default_workflow_type: math_workflow\n    eval_tasksets:",
            "      default_workflow_type: math_workflow\n"
            "      default_reward_fn_type: math_dapo_reward\n"
            "      reward_fn_args: {enable_overlong_penalty: true, max_response_length: 64,"
            " cache_length: 60, penalty_factor: 1.0}\n    eval_tasksets:",
        ),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text + f"monitor:\n  rollout_samples_per_step: {KEPT}\n"


def _run_the_demo(page, stack) -> None:
    page.goto(f"{stack.url}/experiments/")
    log_in(page, stack)
    page.goto(f"{stack.url}/experiments/new/")
    page.fill("#experiment-name", "explore rollouts")
    page.click("[data-tab-target=yaml]")
    page.fill("#config-yaml", _demo_yaml())
    page.click("button[name=source][value=yaml]")
    page.wait_for_url(f"{stack.url}/experiments/*/")
    page.click("#launch")
    page.wait_for_url(f"{stack.url}/runs/*/")
    wait_page(page, stack, "succeeded", lambda s: s["status"] == "succeeded")


def _explore(page, stack, shots: Path) -> None:
    page.click("#open-rollouts")
    page.wait_for_url("**/rollouts/")
    page.wait_for_selector("#rollout-list .rollout")

    # every GRPO step is kept, each with its 8 rollouts; the newest is shown by task group
    options = page.locator("#rollout-step option").all_inner_texts()
    assert len(options) == RFT_STEPS + 1 and options[-1] == "all steps", options
    for n, label in zip(range(RFT_STEPS, 0, -1), options, strict=False):
        assert f"step {n} ({KEPT}," in label, options
    shown = page.evaluate(ROLLOUTS_JS)
    assert len(shown) == KEPT
    assert [r["group"] for r in shown] == ["0"] * 4 + ["1"] * 4
    for group in ("0", "1"):  # GRPO: a group's advantages sum to zero
        advantages = [r["advantage"] for r in shown if r["group"] == group]
        assert math.fsum(advantages) == pytest.approx(0.0, abs=1e-3), shown
    assert "8 rollouts" in page.locator("#rollout-summary").inner_text()
    _check_groups(page, RFT_STEPS)
    keep_screenshot(page, shots, "rollouts-by-group")
    # the picker's values are the steps themselves: step 1 is "1"
    values = page.eval_on_selector_all("#rollout-step option", "os => os.map(o => o.value)")
    assert values == [str(n) for n in range(RFT_STEPS, 0, -1)] + ["all"], values
    page.select_option("#rollout-step", "1")
    _wait_loaded(page, "step=1")
    assert page.locator("#rollout-step").input_value() == "1"
    _check_groups(page, 1)
    # a group folds away and unfolds with a click on its heading
    group = page.locator(".rollout-group").first
    group.locator(":scope > summary").click()
    assert not group.evaluate("(d) => d.open") and not group.locator(".rollout").first.is_visible()
    group.locator(":scope > summary").click()
    assert group.locator(".rollout").first.is_visible()

    # every step at once (24 rollouts, 20 a page), sorted by reward, highest first; then by
    # advantage, lowest first
    page.select_option("#rollout-step", "all")
    _wait_loaded(page, "step=all")
    total = int(page.locator("#rollout-summary").inner_text().split()[0])
    assert total == RFT_STEPS * KEPT
    # by task group over every step: step -> group -> rollouts, the newest step first (20 a
    # page: steps 3 and 2 whole, then step 1's first group and a half)
    shown_steps = page.eval_on_selector_all(".rollout-step", "ss => ss.map(s => s.dataset.step)")
    assert shown_steps == [str(n) for n in range(RFT_STEPS, 0, -1)], shown_steps
    assert page.locator(".rollout-step[data-step='3'] .rollout-group").count() == 2
    assert page.locator(".rollout-step[data-step='3'] .rollout").count() == KEPT
    keep_screenshot(page, shots, "rollouts-every-step-by-group")
    page.select_option("#rollout-sort", "-reward")
    _wait_loaded(page, "sort=-reward")
    assert page.locator("#rollout-list .rollout-group").count() == 0  # one list, in reward order
    rewards = [r["reward"] for r in page.evaluate(ROLLOUTS_JS)]
    assert len(rewards) == 20 and rewards == sorted(rewards, reverse=True), rewards
    assert len(set(rewards)) > 1, f"every reward alike: the sort is not shown {rewards}"
    keep_screenshot(page, shots, "rollouts-sorted-by-reward")
    page.select_option("#rollout-sort", "advantage")
    _wait_loaded(page, "sort=advantage")
    advantages = [r["advantage"] for r in page.evaluate(ROLLOUTS_JS)]
    assert advantages == sorted(advantages) and len(set(advantages)) > 1, advantages

    # the token view of the first rollout: one span per response token, coloured by log-prob
    first = page.locator("#rollout-list .rollout").first
    length = int(first.locator(".rollout-figures .length").inner_text())
    first.locator("details.tokens summary").click()
    tokens = first.locator(".token-view .token")
    assert tokens.count() == length > 0
    spans = tokens.evaluate_all(
        """(spans) => spans.map((s) => ({
          logprob: Number(s.dataset.logprob), colour: getComputedStyle(s).backgroundColor,
          title: s.title }))"""
    )
    assert all(s["logprob"] <= 0 for s in spans), spans
    assert all(s["colour"] not in ("rgba(0, 0, 0, 0)", "transparent") for s in spans), spans
    assert all("log-prob" in s["title"] for s in spans)
    # a likelier token is greener: hue follows exp(log-prob)
    likeliest = max(spans, key=lambda s: s["logprob"])
    unlikeliest = min(spans, key=lambda s: s["logprob"])
    if likeliest["logprob"] - unlikeliest["logprob"] > 1:
        assert _green(likeliest["colour"]) > _green(unlikeliest["colour"]), spans
    first.scroll_into_view_if_needed()
    keep_screenshot(page, shots, "rollouts-token-view")

    # the trainer's log-prob of each token beside the rollout's, and their difference; the
    # trainer trained each step on the weights that sampled it (sync_interval 1, offset 0),
    # so on CPU the two agree up to their rounding to 4 decimals
    spans = tokens.evaluate_all(
        """(spans) => spans.map((s) => ({
          logprob: Number(s.dataset.logprob), trainer: s.dataset.trainerLogprob,
          diff: s.dataset.diff, title: s.title }))"""
    )
    assert all(s["trainer"] not in (None, "") for s in spans), spans
    for s in spans:
        assert float(s["diff"]) == pytest.approx(float(s["trainer"]) - s["logprob"], abs=2e-4)
        assert abs(float(s["diff"])) < 2e-3, spans
        assert "trainer" in s["title"] and "Δ" in s["title"]
    page.select_option("#rollout-colour", "diff")
    view = first.locator(".token-view")
    assert view.get_attribute("data-colour") == "diff"
    assert first.locator("details.tokens").evaluate("(d) => d.open")  # kept open on re-colour
    assert "trainer − rollout" in first.locator(".token-legend").inner_text()
    colours = view.locator(".token").evaluate_all(
        "(spans) => spans.map((s) => getComputedStyle(s).backgroundColor)"
    )
    # |Δ| < 2e-3 is next to no mismatch: every token near white, none in the log-prob hues
    assert all(_lightness(c) > 0.9 for c in colours), colours
    keep_screenshot(page, shots, "rollouts-token-view-difference")
    page.select_option("#rollout-colour", "rollout")

    # search every step: the first rollout's question (its task's rollouts match, not the
    # other tasks'), then text that is nowhere
    question = page.locator("#rollout-list .rollout dd pre").first.inner_text()
    question = question.strip().splitlines()[0][:120]
    page.fill("#rollout-q", question)
    page.click("#rollout-controls button[type=submit]")
    _wait_loaded(page, "q=")
    found = page.locator("#rollout-list .rollout")
    assert 4 <= found.count() < total  # at least the first group, not every rollout
    for text in found.all_inner_texts():
        assert question in text
    assert page.locator("#rollout-list .rollout mark").count() >= found.count()
    keep_screenshot(page, shots, "rollouts-search")
    page.fill("#rollout-q", "zzzz-nowhere")
    page.click("#rollout-controls button[type=submit]")
    _wait_loaded(page, "q=zzzz-nowhere")
    assert page.locator("#rollout-summary").inner_text().startswith("0 rollouts")
    assert page.locator("#rollout-list .rollout").count() == 0


GROUPS_JS = """() => Array.from(document.querySelectorAll('#rollout-list .rollout-step')).map((s) => ({
  step: s.dataset.step, heading: s.querySelector('h2').textContent,
  groups: Array.from(s.querySelectorAll('.rollout-group')).map((g) => ({
    group: g.dataset.group, heading: g.querySelector('summary h3').textContent,
    mean: Number(g.dataset.rewardMean), std: Number(g.dataset.rewardStd),
    rewards: Array.from(g.querySelectorAll('.rollout')).map((a) => Number(a.dataset.reward)) })) }))"""


def _check_groups(page, step: int) -> None:
    """One step shown, its two task groups of 4 rollouts each, each headed by the mean and the
    spread (population standard deviation) of its rollouts' rewards."""
    (shown,) = page.evaluate(GROUPS_JS)
    assert shown["step"] == str(step) and f"step {step}" in shown["heading"], shown
    assert [g["group"] for g in shown["groups"]] == ["0", "1"], shown
    for g in shown["groups"]:
        rewards = g["rewards"]
        assert len(rewards) == 4, g
        mean = math.fsum(rewards) / 4
        std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / 4)
        assert g["mean"] == pytest.approx(mean, abs=1e-9) and g["std"] == pytest.approx(
            std, abs=1e-9
        )
        assert "reward mean" in g["heading"] and "4 samples" in g["heading"], g
        assert "spread (std)" in g["heading"], g


def _wait_loaded(page, part: str) -> None:
    """Until the explorer shows the answer to a query holding ``part`` (rollouts.js sets
    ``data-loaded`` to the query it rendered)."""
    page.wait_for_function(
        "(part) => (document.getElementById('rollout-explorer').dataset.loaded || '').includes(part)",
        arg=part,
    )


def _lightness(colour: str) -> float:
    """The HSL lightness (0-1) of an ``rgb(r, g, b)`` colour."""
    rgb = [float(x) / 255 for x in colour[colour.index("(") + 1 : colour.index(")")].split(",")[:3]]
    return (max(rgb) + min(rgb)) / 2


def _green(colour: str) -> float:
    """The green share of an ``rgb(r, g, b)`` colour."""
    r, g, b = (float(x) for x in colour[colour.index("(") + 1 : colour.index(")")].split(",")[:3])
    return g / max(r + g + b, 1.0)
