"""The site and its demo as the tests reach them without a browser (``e2e/``, ``workers/``): a
requests session logged in through the login form, and the demo config shortened for a quick
run."""

from __future__ import annotations


def log_in_session(session, site) -> None:
    """Log a requests ``session`` in to ``site`` (its url, username, password) by the form."""
    session.get(f"{site.url}/login/", timeout=30).raise_for_status()
    response = session.post(
        f"{site.url}/login/",
        data={
            "username": site.username,
            "password": site.password,
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        timeout=30,
    )
    assert response.ok and "/login/" not in response.url, response.text[:500]


def shorten_demo(config: dict) -> dict:
    """The demo config, in place, cut to 2 SFT steps of 8, then 2 GRPO steps of 4 tasks x 4
    samples with a checkpoint at the last, no evaluation."""
    config["algorithm"]["repeat_times"] = 4
    config["buffer"].update(batch_size=4, total_steps=2)
    config["buffer"]["explorer_input"]["eval_tasksets"] = []
    config["explorer"]["eval_on_startup"] = False
    config["trainer"]["save_interval"] = 2
    config["stages"][0]["buffer"].update(train_batch_size=8, total_steps=2)
    return config
