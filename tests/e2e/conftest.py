"""Browser-test fixtures: a real daphne serving the site on a free port with its own SQLite
database and demo login, and a Playwright page in Debian's chromium (never a downloaded browser)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from workers.services import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@dataclass
class LiveSite:
    url: str
    username: str
    password: str
    env: dict[str, str]

    def manage(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )


@pytest.fixture(scope="session")
def live_site(tmp_path_factory, redis_url) -> LiveSite:
    var = tmp_path_factory.mktemp("site-var")
    port = free_port()
    env = {
        **os.environ,
        "RFT_VAR_DIR": str(var),
        "DATABASE_URL": f"sqlite:///{var / 'db.sqlite3'}",
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }
    login_file = var / "login.txt"
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    subprocess.run(
        [
            sys.executable,
            "manage.py",
            "ensure_demo_user",
            "--username",
            "e2e",
            "--login-file",
            str(login_file),
        ],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    fields = dict(line.split(": ", 1) for line in login_file.read_text().splitlines())
    log = open(var / "daphne.log", "wb")  # noqa: SIM115 - closed after the server stops
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "webapp.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/health.json", server, var / "daphne.log")
        yield LiveSite(url=url, username=fields["username"], password=fields["password"], env=env)
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


def _wait_http(url: str, server: subprocess.Popen, log_path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(
                f"daphne exited ({server.returncode}):\n{log_path.read_text()[-2000:]}"
            )
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"daphne did not answer at {url} within {timeout} s")


@pytest.fixture
def browser():
    """Per test: Playwright's sync API keeps an event loop on the main thread while it runs,
    which would break async_to_sync in every later test of the session."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install -y chromium` (.ci/run does it)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


@pytest.fixture
def logged_in_page(page, live_site):
    """A page already signed in as the site's demo user (through the real login form)."""
    page.goto(f"{live_site.url}/login/")
    page.fill("input[name=username]", live_site.username)
    page.fill("input[name=password]", live_site.password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_site.url}/")
    return page
