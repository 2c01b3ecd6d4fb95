"""Four bad values in the experiment form, in Debian's chromium: one save shows four errors,
each inside its own field's box (the CLI's wording), and the YAML tab lists a pasted config's
errors with their paths. A screenshot is kept under ``$RFT_ARTIFACTS_DIR`` when it is set."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from tests.webapp.browser_session import signed_in_page

pytestmark = pytest.mark.browser


def _error_beside(page, name: str) -> str:
    """The error text inside the field box that holds the input ``name``."""
    box = page.locator(".field.has-error", has=page.locator(f"[name='{name}']"))
    return box.locator(".field-error").inner_text()


def _keep(page, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if artifacts := os.environ.get("RFT_ARTIFACTS_DIR"):
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(artifacts) / path.name)


@pytest.mark.django_db(transaction=True)
def test_four_bad_form_fields_show_four_errors_each_beside_its_field(live_server, roots, tmp_path):
    get_user_model().objects.create_user("alice", password="pw-alice-123")
    with signed_in_page(live_server.url, "alice", "pw-alice-123") as (page, page_errors):
        page.goto(live_server.url + "/experiments/new/")
        # the beginner form: the four fields are there without the expert switch
        page.fill("#experiment-name", "four bad values")
        page.fill("[name='algorithm.optimizer.lr']", "3e-5x")
        page.fill("[name='buffer.batch_size']", "-4")
        page.fill("[name='buffer.total_steps']", "ten")
        page.fill("[name='model.model_path']", str(roots[0] / "modle"))
        page.click("[data-tab-panel=form] button[type=submit]")
        page.wait_for_selector("#save-errors")
        _keep(page, tmp_path, "form_four_errors")
        assert page.locator(".field.has-error").count() == 4
        assert (
            _error_beside(page, "algorithm.optimizer.lr") == "must be a number, got '3e-5x' (str)"
        )
        # the demo's rft stage inherits the global buffer (the CLI's line says so)
        assert (
            _error_beside(page, "buffer.batch_size")
            == "must be >= 1, got -4 (inherited by stage 'rft')"
        )
        assert _error_beside(page, "buffer.total_steps") == "must be an integer, got 'ten' (str)"
        assert _error_beside(page, "model.model_path").startswith(
            f"'{roots[0] / 'modle'}' does not exist on this server"
        )
        assert "Not saved: 4 problems" in page.inner_text("#save-errors")
        # what the user typed is kept, and the override is offered
        assert page.input_value("[name='buffer.total_steps']") == "ten"
        assert page.is_visible("#paths-exist-elsewhere")

        # the YAML tab: a pasted config with a typo and a bad lr lists both with their paths
        page.click("[data-tab-target=yaml]")
        page.wait_for_function("document.querySelector('#config-yaml').value.includes('lr: 3e-5x')")
        text = page.input_value("#config-yaml")
        text = text.replace("lr: 3e-5x", "lr: fast").replace("batch_size: -4", "batch_sise: 4")
        text = text.replace("total_steps: ten", "total_steps: 3")
        text = text.replace(str(roots[0] / "modle"), str(roots[0] / "model"))
        page.fill("#config-yaml", text)
        with page.expect_navigation():
            page.click("[data-tab-panel=yaml] button[type=submit]")
        assert page.input_value("#config-yaml").count("batch_sise: 4") == 1  # kept as pasted
        _keep(page, tmp_path, "yaml_two_errors")
        items = page.locator("#save-errors li")
        assert items.count() == 2
        assert items.nth(0).get_attribute("data-path") == "algorithm.optimizer.lr"
        assert (
            items.nth(0).inner_text()
            == "algorithm.optimizer.lr: must be a number, got 'fast' (str)"
        )
        assert items.nth(1).get_attribute("data-path") == "buffer.batch_sise"
        assert "unknown key 'batch_sise' (did you mean 'batch_size'?)" in items.nth(1).inner_text()
    assert page_errors == []
