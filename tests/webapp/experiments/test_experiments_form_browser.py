"""The experiment form's JS in Debian's chromium: expert switch, conditional fields (vLLM,
critic, the chosen advantage fn's arguments), adding and reordering an eval taskset, a stage's
override field, form -> YAML -> form tab switches, and saving; a stage's own eval taskset
edited in fields and moved with its stage."""

from __future__ import annotations

import pytest
import yaml
from django.contrib.auth import get_user_model
from playwright.sync_api import sync_playwright

pytestmark = pytest.mark.browser


@pytest.mark.django_db(transaction=True)
def test_the_form_tabs_lists_and_conditional_fields_work_in_a_browser(live_server, roots):
    get_user_model().objects.create_user("alice", password="pw-alice-123")
    errors = []
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking"],
        )
        page = b.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        # pytest-django's live_server is WSGI and answers no WebSocket: the experiment list's live
        # feed (/ws/runs/, tested on daphne in tests/e2e) fails here, which is not this test's
        page.on(
            "console",
            lambda m: (
                errors.append(m.text) if m.type == "error" and "/ws/runs/" not in m.text else None
            ),
        )
        page.route("**/favicon.ico", lambda route: route.fulfill(status=204))
        page.goto(live_server.url + "/login/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "pw-alice-123")
        page.click("button[type=submit]")
        page.goto(live_server.url + "/experiments/new/")
        assert not page.is_visible("[name='trainer.trainer_strategy']")
        page.check("#expert-switch")
        assert page.is_visible("[name='trainer.trainer_strategy']")
        assert not page.is_visible("[name='explorer.rollout_model.gpu_memory_utilization']")
        page.select_option("[name='explorer.rollout_model.engine_type']", "vllm")
        assert page.is_visible("[name='explorer.rollout_model.gpu_memory_utilization']")
        assert page.is_visible("[name='algorithm.advantage_fn_args.epsilon']")
        assert not page.is_visible("[name='algorithm.advantage_fn_args.lam']")
        page.select_option("[name='algorithm.algorithm_type']", "ppo")
        assert page.is_visible("[name='algorithm.advantage_fn_args.lam']")
        assert page.is_visible("[name='model.critic_model_path']")
        page.select_option("[name='algorithm.algorithm_type']", "grpo")
        page.select_option("[name='explorer.rollout_model.engine_type']", "hf")
        # add an eval taskset, move it up, switch to YAML
        page.click("[data-list='buffer.explorer_input.eval_tasksets'] .add-item")
        page.fill("[name='buffer.explorer_input.eval_tasksets[1].name']", "extra")
        # a path that exists on the server (a save refuses one that does not)
        page.fill("[name='buffer.explorer_input.eval_tasksets[1].path']", str(roots[0] / "gsm8k"))
        page.click(
            "[data-list='buffer.explorer_input.eval_tasksets'] .list-item:nth-child(2) .move-up"
        )
        page.fill("[name='buffer.total_steps']", "3")
        # a stage's override is a field like the main form's (the warmup stage's buffer)
        assert page.input_value("[name='stages[0].buffer.total_steps']") == "500"
        page.fill("[name='stages[0].buffer.total_steps']", "9")
        page.click("[data-tab-target=yaml]")
        page.wait_for_function(
            "document.querySelector('#config-yaml').value.includes('name: extra')"
        )
        text = page.input_value("#config-yaml")
        assert text.index("name: extra") < text.index("name: arithmetic-eval"), text
        assert "total_steps: 9" in text and "total_steps: 500" not in text
        page.fill("#config-yaml", text.replace("total_steps: 3", "total_steps: 4"))
        page.click("[data-tab-target=form]")
        page.wait_for_function(
            "document.querySelector(\"[name='buffer.total_steps']\").value === '4'"
        )
        assert page.input_value("[name='stages[0].buffer.total_steps']") == "9"
        page.fill("#experiment-name", "browser exp")
        page.click("[data-tab-panel=form] button[type=submit]")
        page.wait_for_url("**/experiments/*/")
        html = page.content()
        assert "browser exp" in html and "total_steps: 4" in html and "name: extra" in html
        assert "total_steps: 9" in html
        b.close()
    assert errors == []


@pytest.mark.django_db(transaction=True)
def test_a_stages_eval_taskset_is_edited_in_fields_and_follows_its_stage(live_server, roots):
    from tests.webapp.browser_session import signed_in_page

    get_user_model().objects.create_user("alice", password="pw-alice-123")
    with signed_in_page(live_server.url, "alice", "pw-alice-123") as (page, errors):
        page.goto(live_server.url + "/experiments/new/")
        page.check("#expert-switch")
        # the rft stage (stages[1]) gets an eval taskset of its own, in fields
        evals = "stages[1].buffer.explorer_input.eval_tasksets"
        page.click(f"[data-list='{evals}'] .add-item")
        page.fill(f"[name='{evals}[0].name']", "stage-eval")
        page.fill(f"[name='{evals}[0].path']", str(roots[0] / "stage-eval"))
        # then the rft stage moves first: its eval taskset goes with it
        page.click("[data-list='stages'] > .list-items > .list-item:nth-child(2) > legend .move-up")
        page.click("[data-tab-target=yaml]")
        page.wait_for_function(
            "document.querySelector('#config-yaml').value.includes('name: stage-eval')"
        )
        stages = yaml.safe_load(page.input_value("#config-yaml"))["stages"]
        assert [s["stage_name"] for s in stages] == ["rft", "sft_warmup"]
        assert stages[0]["buffer"]["explorer_input"]["eval_tasksets"] == [
            {"name": "stage-eval", "path": str(roots[0] / "stage-eval")}
        ]
        assert stages[1]["buffer"]["trainer_input"]["experience_buffer"]["path"].endswith(
            "/sft/train.jsonl"
        )
        # YAML -> form: the value is back in the stage's field, where it now is
        page.click("[data-tab-target=form]")
        moved = "[name='stages[0].buffer.explorer_input.eval_tasksets[0].path']"
        page.wait_for_selector(moved, state="attached")
        assert page.input_value(moved) == str(roots[0] / "stage-eval")
        assert page.input_value("[name='stages[1].buffer.total_steps']") == "500"
    assert errors == []
