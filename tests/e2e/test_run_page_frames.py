"""The live run page draws once an animation frame: the ``events`` batches that reach its
socket between two frames are applied together, one ``Plotly.extendTraces`` per trace for all of
them (static/js/run_page.js ``onBatch``). Beside the demo training on the same two cores the page
otherwise redraws for every ingestor batch (benchmarks/README.md, ``live_latency.py``).

The page's clock is Playwright's: paused, no frame comes until the test runs it on, so the
batches that arrive meanwhile are those of one frame whatever the machine's load.
"""

from __future__ import annotations

import time

import pytest
import run_page_site
from run_page_site import sign_in, trace, wait_points

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

live_site, user, watched_run = run_page_site.fixtures()

# the steps of each socket message's metric events, and every extendTraces call's chart, trace
# and number of points (Plotly's own function, wrapped once the page has drawn its charts)
RECORD_SOCKET_JS = """() => {
  window.__socketSteps = [];
  const Native = window.WebSocket;
  window.WebSocket = function (url, protocols) {
    const ws = new Native(url, protocols);
    ws.addEventListener("message", (e) => {
      const msg = JSON.parse(e.data);
      if (msg.type !== "events") return;
      const steps = msg.events.filter((ev) => ev.kind === "metric").map((ev) => ev.step);
      if (steps.length) window.__socketSteps.push(steps);
    });
    return ws;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.setPrototypeOf(window.WebSocket, Native); // OPEN, CLOSED, ...
}"""
RECORD_EXTENDS_JS = """() => {
  window.__extends = [];
  const extend = Plotly.extendTraces;
  Plotly.extendTraces = function (div, update, indices) {
    window.__extends.push([div.dataset.metric, indices[0], update.x[0].length]);
    return extend.apply(this, arguments);
  };
}"""


def _wait_socket_steps(page, steps: list[int]) -> list[list[int]]:
    """Poll from here (the page's timers are paused): the socket messages once ``steps`` came."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = page.evaluate("() => window.__socketSteps")
        if sorted(s for message in got for s in message)[-len(steps) :] == steps:
            return got
        time.sleep(0.2)
    raise AssertionError(f"steps {steps} never reached the page's socket: {got}")


def test_the_batches_of_one_frame_are_drawn_with_one_extend_per_trace(
    live_site, watched_run, browser, user
):
    sft = watched_run.monitor("trainer", "sft_warmup")
    for step in range(1, 13):  # past the 10 points a series needs to be drawn smoothed
        sft.log({"actor/sft_loss": 2.0 / step}, step=step)
    page = browser.new_page()
    page.set_default_timeout(30_000)
    page.add_init_script(f"({RECORD_SOCKET_JS})()")
    page.clock.install()
    sign_in(page, live_site.url, user.username)
    page.goto(f"{live_site.url}{watched_run.run.get_absolute_url()}")
    page.wait_for_selector("#run-page[data-live=ready][data-transport=websocket]")
    wait_points(page, "actor/sft_loss", 12)
    page.evaluate(RECORD_EXTENDS_JS)

    page.clock.pause_at(int(time.time() * 1000) + 1000)  # no frame, no timer from here on
    for step in (13, 14, 15):  # each its own ingestor batch, its own socket message
        sft.log({"actor/sft_loss": 2.0 / step}, step=step)
        messages = _wait_socket_steps(page, list(range(13, step + 1)))
    assert [m for m in messages if set(m) & {13, 14, 15}] == [[13], [14], [15]]
    assert page.evaluate("() => window.__extends") == []  # held for the next frame

    page.clock.run_for(50)  # the next animation frame (the 1 s fallback timer is not due)
    # one call per trace for the three batches: the raw and the smoothed trace, 3 points each
    assert page.evaluate("() => window.__extends") == [
        ["actor/sft_loss", 0, 3],
        ["actor/sft_loss", 1, 3],
    ]
    assert trace(page, "actor/sft_loss", "raw", "x")[-4:] == [12, 13, 14, 15]
    assert trace(page, "actor/sft_loss", "raw", "y")[-3:] == [2.0 / 13, 2.0 / 14, 2.0 / 15]
    page.close()


def test_a_chart_off_screen_gets_no_live_draws_and_all_its_points_when_it_comes_into_view(
    live_site, watched_run, browser, user
):
    sft = watched_run.monitor("trainer", "sft_warmup")
    for step in range(1, 13):
        sft.log({"actor/sft_loss": 2.0 / step}, step=step)
    page = browser.new_page(viewport={"width": 1280, "height": 500})
    page.set_default_timeout(30_000)
    page.add_init_script(f"({RECORD_SOCKET_JS})()")
    sign_in(page, live_site.url, user.username)
    page.goto(f"{live_site.url}{watched_run.run.get_absolute_url()}")
    page.wait_for_selector("#run-page[data-live=ready][data-transport=websocket]")
    wait_points(page, "actor/sft_loss", 12)
    page.evaluate(RECORD_EXTENDS_JS)
    # the charts pushed far below the window (5,000 px of space above them), the page at its top
    page.evaluate(
        """() => { const gap = document.createElement("div"); gap.style.height = "5000px";
                   document.getElementById("charts").before(gap); window.scrollTo(0, 0); }"""
    )
    chart_js = """() => { const r = document.querySelector('.chart[data-metric="actor/sft_loss"]')
                          .getBoundingClientRect(); return r.top > innerHeight + 1000; }"""
    assert page.evaluate(chart_js)
    page.wait_for_timeout(300)  # frames pass: the board learns the chart is off screen

    for step in (13, 14, 15):
        sft.log({"actor/sft_loss": 2.0 / step}, step=step)
    _wait_socket_steps(page, [13, 14, 15])
    page.wait_for_timeout(1500)  # past the next frames and the 1 s fallback timer
    assert page.evaluate("() => window.__extends") == []  # no Plotly work for an unseen chart
    drawn = (
        """() => document.querySelector('.chart[data-metric="actor/sft_loss"]').data[0].x.length"""
    )
    assert page.evaluate(drawn) == 12

    wait_points(page, "actor/sft_loss", 15)  # scrolled into view: drawn whole, the 3 new points too
    assert trace(page, "actor/sft_loss", "raw", "x")[-4:] == [12, 13, 14, 15]
    assert trace(page, "actor/sft_loss", "raw", "y")[-3:] == [2.0 / 13, 2.0 / 14, 2.0 / 15]
    page.close()
