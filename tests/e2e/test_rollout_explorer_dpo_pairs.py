"""A DPO run's pairs in the rollout explorer, in Debian's chromium against a real daphne: the
trainer's ``samples`` entries of two kept pairs (``rft_core.explorer.rollout_samples.pair_samples``
on the demo tokenizer, stored through the event store as the ingestor stores them) show as two
pair groups, each row with its side, and a token view coloured by the trainer's log-prob alone
(the responses were not sampled: no rollout log-prob, no difference), its legend naming the
sums under the policy and the reference; and the run page's live samples panel shows each pair as
one card (the prompt once, the chosen and rejected responses with their implicit rewards, the
margin and the loss). A browser console error fails the test.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.browser

SEED = """
import json
from django.contrib.auth import get_user_model
from rft_core.demo import build_tokenizer
from rft_core.experience import Experience
from rft_core.explorer.rollout_samples import PAIR_INFO_KEY, mark_pairs, pair_samples
from rft_core.monitor import MonitorEvent
from webapp.ingest.store import rows_of, store_events
from webapp.experiments.models import Experiment
from webapp.runs.models import Run
owner = get_user_model().objects.get(username={username!r})
e = Experiment.objects.create(owner=owner, name={name!r}, config_yaml='', config={{}})
run = Run.objects.create(experiment=e, number=1, status='succeeded', config_yaml='')
tok = build_tokenizer()
ids = lambda text: tok.encode(text, add_special_tokens=False)
pairs = mark_pairs([Experience(ids('1+2=?'), ids('3'), rejected_ids=ids('4!')),
                    Experience(ids('2+2=?'), ids('4'), rejected_ids=ids('5'))], limit=4)
for pair, margin in zip(pairs, (0.075, -0.02)):
    pair.info[PAIR_INFO_KEY] = {{
        'chosen': [-0.05] * len(pair.response_ids), 'rejected': [-3.0] * len(pair.rejected_ids),
        'reference_sums': {{'chosen': -0.8, 'rejected': -2.5}},
        'terms': {{'dpo_loss': 0.66, 'dpo_chosen_reward': 0.025, 'dpo_rejected_reward': -0.05,
                   'dpo_margin': margin, 'dpo_accuracy': float(margin > 0)}}}}
event = MonitorEvent(run.key, 'samples', 'trainer', 3,
                     {{'samples': pair_samples(pairs, 3, tokenizer=tok)}}, stage='')
store_events(run.key, rows_of(run.key, [('1-0', event)]))
print(json.dumps({{'run': run.pk}}))
"""


def _seeded_run(page, live_site, name: str) -> tuple[int, list[str]]:
    """The DPO run seeded in a new experiment ``name``: its pk, and the list the page's console
    errors go to."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    out = live_site.manage(
        "shell", "-c", SEED.format(username=live_site.username, name=name)
    ).stdout
    return json.loads(out.strip().splitlines()[-1])["run"], errors


def test_a_dpo_runs_pairs_show_their_tokens_by_the_trainers_logprob(logged_in_page, live_site):
    page = logged_in_page
    run, errors = _seeded_run(page, live_site, "dpo-pairs-explorer")

    page.goto(f"{live_site.url}/runs/{run}/rollouts/")
    page.wait_for_selector("#rollout-list .rollout-group")
    headings = page.eval_on_selector_all(".rollout-group h3", "hs => hs.map(h => h.textContent)")
    assert headings == [
        "Pair 0 · margin 0.0750 · loss 0.6600",
        "Pair 1 · margin -0.0200 · loss 0.6600",
    ]
    sides = page.eval_on_selector_all(
        "#rollout-list .rollout .side", "s => s.map(x => x.textContent)"
    )
    assert sides == ["chosen", "rejected", "chosen", "rejected"]

    rejected = page.locator("#rollout-list .rollout").nth(1)
    rejected.locator("details.tokens summary").click()
    view = rejected.locator(".token-view")
    assert view.get_attribute("data-colour") == "trainer"  # though the picker says rollout
    spans = view.locator(".token")
    assert spans.count() == 2  # "4", "!"
    assert spans.nth(0).get_attribute("data-trainer-logprob") == "-3"
    assert spans.nth(0).get_attribute("data-diff") == ""  # nothing to subtract
    # p = e^-3 ≈ 0.05: hue 120·p = 6, the red end of the scale (a missing value: transparent)
    assert "background:hsl(6,75%,82%)" in spans.nth(0).get_attribute("style")
    title = spans.nth(0).get_attribute("title")
    assert "trainer -3.0000" in title and "rollout" not in title and "Δ" not in title
    legend = rejected.locator(".token-legend").text_content()
    assert "mean trainer log-prob -3.000, sum -6.000 (reference -2.500) at trainer step 3" in legend
    assert "not sampled by a rollout engine" in legend
    assert errors == []


def test_the_run_pages_samples_panel_shows_each_pair_as_one_card(logged_in_page, live_site):
    page = logged_in_page
    run, errors = _seeded_run(page, live_site, "dpo-pairs-run-page")
    page.goto(f"{live_site.url}/runs/{run}/")
    page.wait_for_selector("#samples .sample.pair")
    cards = page.locator("#samples .sample")
    assert cards.count() == 2  # two pairs, not four rows
    first = cards.nth(0)
    assert first.locator(".reward").text_content() == "pair 0 · margin 0.0750 · loss 0.6600"
    assert first.locator("dt").all_text_contents() == ["prompt", "chosen", "rejected"]
    responses = first.locator("dd pre").all_text_contents()
    assert responses == ["1+2=?", "3", "4!"]
    rewards = first.locator("dd .hint").all_text_contents()
    assert rewards == ["implicit reward 0.0250", "implicit reward -0.0500"]
    assert cards.nth(1).locator(".reward").text_content() == "pair 1 · margin -0.0200 · loss 0.6600"
    assert errors == []
