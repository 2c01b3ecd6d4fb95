"""The run page's checkpoint table in Debian's chromium after retention (issue 23): every
checkpoint still on disk, the retained best included, offers Convert and Fork; a pruned row says
pruned (naming ``trainer.max_checkpoints_to_keep``) and offers neither."""

from __future__ import annotations

import pytest
from browser_session import signed_in_page

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
        pruned = row(20)
        assert pruned.get_attribute("data-hf-status") == "pruned"
        assert "pruned (deleted by trainer.max_checkpoints_to_keep)" in pruned.inner_text()
        assert pruned.locator("button, a.fork").count() == 0
    assert errors == []
