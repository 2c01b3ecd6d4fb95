"""The run page's checkpoint table in Debian's chromium after retention (issue 23): every
checkpoint still on disk, the retained best included, offers Convert and Fork; a pruned row says
pruned (naming ``trainer.max_checkpoints_to_keep``) and offers neither. The pruned rows are
folded into one summary row after the rows on disk, opened on a click (issue 31: 44 pruned rows
stood before the 3 real ones), and the evaluation page's picker lists none of them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from browser_session import signed_in_page
from demo_rows import full_checkpoint

from webapp.checkpoints.actions import sync_checkpoints

pytestmark = pytest.mark.browser


@pytest.mark.django_db(transaction=True)
def test_pruned_rows_have_no_convert_or_fork_and_the_rest_have_both(
    live_server,
    alice,
    pruned_run,
):
    run, rows = pruned_run
    alice.set_password("pw-alice-123")
    alice.save()
    with signed_in_page(live_server.url, "alice", "pw-alice-123") as (page, errors):
        page.goto(live_server.url + f"/runs/{run.pk}/")
        # live.json's snapshot fills the table (the WebSocket is daphne's, not live_server's)
        page.wait_for_selector(f'tr[data-checkpoint="{rows[30].pk}"]')

        def row(step: int):
            return page.locator(f'tr[data-checkpoint="{rows[step].pk}"]')

        for step in (10, 30):  # the best by eval accuracy and the newest
            assert row(step).get_attribute("data-hf-status") == "absent"
            assert row(step).locator("button.convert").count() == 1
            assert row(step).locator("a.fork").get_attribute("href") == (
                f"/checkpoints/{rows[step].pk}/fork/"
            )
        # the pruned row is folded: one summary row after the two on disk, opened by a click
        steps = page.locator("#checkpoint-rows tr[data-step]")
        assert [steps.nth(i).get_attribute("data-step") for i in range(steps.count())] == [
            "10",
            "30",
        ]
        summary = page.locator("#checkpoint-rows tr.pruned-summary")
        assert summary.inner_text().startswith("▸ 1 pruned checkpoint")
        summary.locator("button").click()
        pruned = row(20)
        assert pruned.get_attribute("data-hf-status") == "pruned"
        assert "pruned (deleted by trainer.max_checkpoints_to_keep)" in pruned.inner_text()
        assert pruned.locator("button, a.fork").count() == 0
    assert errors == []


@pytest.mark.django_db(transaction=True)
def test_many_pruned_rows_fold_into_one_row_and_the_evaluation_picker_lists_none(
    live_server, alice, pruned_run
):
    run, rows = pruned_run
    stage = rows[30].path.rsplit("/", 1)[0]
    # 40 more steps that retention deleted: rows seen on disk, then gone (as a long run leaves)
    made = [full_checkpoint(Path(stage), s) for s in range(100, 140)]
    sync_checkpoints(run)
    for step_dir in made:
        shutil.rmtree(step_dir)
    sync_checkpoints(run)
    alice.set_password("pw-alice-123")
    alice.save()
    with signed_in_page(live_server.url, "alice", "pw-alice-123") as (page, errors):
        page.goto(live_server.url + f"/runs/{run.pk}/")
        page.wait_for_selector("#checkpoint-rows tr.pruned-summary")
        body = page.locator("#checkpoint-rows > tr")
        # the two checkpoints on disk first, then the one summary row of the 41 pruned
        assert body.count() == 3
        assert body.nth(0).get_attribute("data-step") == "10"
        assert body.nth(1).get_attribute("data-step") == "30"
        toggle = body.nth(2).locator("button.pruned-toggle")
        assert toggle.inner_text() == "▸ 41 pruned checkpoints"
        assert toggle.get_attribute("aria-expanded") == "false"
        toggle.click()
        page.wait_for_selector("#checkpoint-rows tr[data-step='139'][data-hf-status=pruned]")
        assert body.count() == 3 + 41
        assert page.locator("button.pruned-toggle").get_attribute("aria-expanded") == "true"
        page.locator("button.pruned-toggle").click()  # folds again
        page.wait_for_function(
            "() => document.querySelectorAll('#checkpoint-rows > tr').length === 3"
        )

        page.goto(live_server.url + f"/runs/{run.pk}/evaluations/")
        picker = page.locator("#evaluate-form input[name=checkpoint]")
        assert [picker.nth(i).get_attribute("data-step") for i in range(picker.count())] == [
            "10",
            "30",
        ]
        assert page.locator("#evaluate-form input[disabled]").count() == 0
        assert page.locator("#pruned-note").inner_text() == (
            "41 pruned checkpoints not listed: deleted by trainer.max_checkpoints_to_keep."
        )
    assert errors == []
