"""The README's curl session, checked: on the whole stack really started (daphne, a Celery
worker, the ingestor, a Ray head, Redis, one database) with the demo experiment seeded as
``make demo`` seeds it, a user creates an API token on /account/ (through the real login and
token forms), then ``webapp/api/curl_session.sh`` — the very text the README shows — lists the
experiments, launches the demo, polls the run until it is final and fetches its reward curve.

The demo is shortened first through the API's PATCH (2 SFT steps of 8, then 2 GRPO steps of 4
tasks x 4 samples, no eval), as a user would for a quick try.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import requests
from demo_site import log_in_session, shorten_demo

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "webapp" / "api" / "curl_session.sh"
# A guard against a hung run, not a timing assertion: the shortened demo takes well under this.
RUN_GUARD_S = 400


def _token_from_account_page(stack) -> str:
    """Log in and create a token the way a user does: the login form, then /account/."""
    browser = requests.Session()
    log_in_session(browser, stack)
    browser.get(f"{stack.url}/account/", timeout=30).raise_for_status()
    created = browser.post(
        f"{stack.url}/account/tokens/new/",
        data={"name": "curl", "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
        timeout=30,
    )
    assert created.ok and created.url.endswith("/account/"), created.text[:500]
    key = re.search(r'<pre id="new-token-key">(rft_[A-Za-z0-9_-]+)</pre>', created.text)
    assert key, created.text[:2000]
    again = browser.get(f"{stack.url}/account/", timeout=30).text
    assert key.group(1) not in again  # shown once
    return key.group(1)


def _shorten_the_demo(stack, token: str) -> int:
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {token}"
    listed = api.get(f"{stack.url}/api/v1/experiments/?search=grpo_demo", timeout=30).json()
    (demo,) = [e for e in listed["results"] if e["name"] == "grpo_demo"]
    config = api.get(f"{stack.url}/api/v1/experiments/{demo['id']}/", timeout=30).json()["config"]
    shorten_demo(config)
    patched = api.patch(
        f"{stack.url}/api/v1/experiments/{demo['id']}/",
        json={"config": config, "note": "shortened for the curl session test"},
        timeout=60,
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["version"] == 2
    return demo["id"]


def test_the_readme_curl_session_launches_the_demo_and_polls_it_to_the_end(stack):
    subprocess.run(
        [sys.executable, "manage.py", "ensure_demo_experiment", "--username", stack.username],
        cwd=ROOT,
        env=stack.env,
        check=True,
        capture_output=True,
    )
    token = _token_from_account_page(stack)
    experiment_id = _shorten_the_demo(stack, token)

    session = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=ROOT,
        env={**stack.env, "TOKEN": token, "BASE": stack.url, "POLL_S": "2"},
        capture_output=True,
        text=True,
        timeout=RUN_GUARD_S,
    )
    out = session.stdout
    print(out)
    assert session.returncode == 0, f"{session.stderr}\n{out}\n{stack.logs_tail()}"
    lines = out.strip().splitlines()
    listed = json.loads(lines[0])
    assert listed["id"] == experiment_id and listed["name"] == "grpo_demo"
    launched = re.search(r"^launched run (\d+) of experiment (\d+)$", out, re.M)
    assert launched and int(launched.group(2)) == experiment_id
    final = json.loads(lines[-3])
    assert final["status"] == "succeeded", f"{final}\n{stack.logs_tail()}"
    names = json.loads(lines[-2])
    assert "rollout/reward/mean" in names, names
    curve = json.loads(lines[-1])
    # 2 GRPO steps: one reward point per step, each a mean reward of the step's rollouts
    assert [step for step, _ in curve] == [1, 2], curve
    assert all(isinstance(value, (int, float)) for _, value in curve), curve  # jq prints 0.0 as 0
