"""The rollout explorer's data: ``samples`` events -> RolloutSample rows with their group,
advantage, length, cut flag and token view (webapp.runs.telemetry), and ``GET
/runs/<id>/rollouts.json`` choosing a step, sorting, searching and paging them
(webapp.runs.rollouts). Access is the authorization matrix's (route_matrix.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from api_helpers import make_experiment, make_run, make_user

from webapp.events.models import RunEvent
from webapp.runs.models import RolloutSample
from webapp.runs.rollouts import PAGE_SIZE
from webapp.runs.telemetry import record_samples

pytestmark = pytest.mark.django_db


def _event(step: int, samples: list[dict], stage: str = "rft") -> RunEvent:
    return RunEvent(
        run_key="k",
        stream_id=f"{step}-0",
        kind="samples",
        role="explorer",
        stage=stage,
        step=step,
        payload={"samples": samples},
        emitted_at=datetime.fromtimestamp(1_733_150_000 + step, tz=UTC),
    )


def _sample(group: int, reward: float, advantage: float | None, response: str, **extra) -> dict:
    return {
        "prompt": f"What is {group}+{group}?",
        "response": response,
        "truth": str(2 * group),
        "reward": reward,
        "reward_parts": {"accuracy": reward},
        "group": group,
        "advantage": advantage,
        "response_length": len(response),
        "truncated": len(response) >= 6,
        "tokens": list(response),
        "logprobs": [-0.5] * len(response),
        **extra,
    }


@pytest.fixture
def owner_run():
    alice = make_user("alice")
    run = make_run(make_experiment(alice, "e"))
    return alice, run


def _steps(run, steps: dict[int, list[dict]], stage: str = "rft") -> None:
    record_samples(run, [_event(step, rows, stage) for step, rows in steps.items()])


def _get(client, run, **params):
    response = client.get(f"/runs/{run.pk}/rollouts.json", params)
    return response.status_code, response.json()


def test_a_samples_entry_fills_the_columns_and_the_token_view(owner_run):
    _, run = owner_run
    entry = _sample(1, 1.0, 0.7071, "2 ok", trainer_logprobs=[-0.4, None, -0.1, -0.2])
    entry["logprobs"] = [-0.5, float("nan"), -0.25, -1.0]
    _steps(run, {3: [entry, {**_sample(1, 0.0, None, "x"), "logprobs": [-1.0, -2.0]}]})
    first, second = RolloutSample.objects.filter(run=run).order_by("id")
    assert (first.step, first.stage, first.group, first.advantage) == (3, "rft", 1, 0.7071)
    assert (first.response_length, first.truncated, first.reward) == (4, False, 1.0)
    assert first.tokens == {
        "tokens": ["2", " ", "o", "k"],
        "logprobs": [-0.5, None, -0.25, -1.0],  # NaN as null: the row stays JSON
        "trainer_logprobs": [-0.4, None, -0.1, -0.2],
    }
    assert first.extra == {"reward_parts": {"accuracy": 1.0}}  # the columns are not repeated
    # log-probs of another length than the tokens are dropped, not shown against wrong tokens
    assert second.advantage is None and second.tokens == {"tokens": ["x"]}


def test_it_shows_the_newest_step_by_task_group_by_default(client, owner_run):
    alice, run = owner_run
    _steps(
        run,
        {
            1: [_sample(0, 0.0, 0.0, "a")],
            3: [_sample(1, 1.0, 1.0, "b"), _sample(0, 0.5, -1.0, "c")],
        },
    )
    client.force_login(alice)
    status, body = _get(client, run)
    assert status == 200
    assert [(s["step"], s["samples"]) for s in body["steps"]] == [(1, 1), (3, 2)]
    assert body["steps"][1]["reward_mean"] == pytest.approx(0.75)
    assert (body["stage"], body["step"], body["total"]) == ("rft", 3, 2)
    assert [i["response"] for i in body["items"]] == ["c", "b"]  # group 0, then group 1
    assert body["items"][1]["tokens"]["logprobs"] == [-0.5]
    status, body = _get(client, run, step="1")
    assert [i["response"] for i in body["items"]] == ["a"]


def test_each_task_group_shown_carries_its_reward_mean_and_spread_over_all_its_rollouts(
    client, owner_run
):
    alice, run = owner_run
    # step 4: group 0's rewards 0, 1, 1, 0 (mean 0.5, population std 0.5), group 1's 0.25 x 2
    # (std 0); step 2: group 0 alone, reward 1
    _steps(
        run,
        {
            2: [_sample(0, 1.0, 0.0, "old")],
            4: [_sample(0, r, 0.0, f"g0-{k}") for k, r in enumerate([0.0, 1.0, 1.0, 0.0])]
            + [_sample(1, 0.25, 0.0, f"g1-{k}") for k in range(2)],
        },
    )
    client.force_login(alice)
    _, body = _get(client, run)
    summaries = {(g["step"], g["group"]): g for g in body["groups"]}
    assert set(summaries) == {(4, 0), (4, 1)}
    g0, g1 = summaries[(4, 0)], summaries[(4, 1)]
    assert (g0["samples"], g0["reward_mean"], g0["reward_std"]) == (4, 0.5, pytest.approx(0.5))
    assert (g0["reward_min"], g0["reward_max"]) == (0.0, 1.0)
    assert (g1["samples"], g1["reward_mean"], g1["reward_std"]) == (2, 0.25, pytest.approx(0.0))
    # a search shows one rollout of group 0; its summary is still the whole group's
    _, body = _get(client, run, q="g0-1")
    assert [i["response"] for i in body["items"]] == ["g0-1"]
    (only,) = body["groups"]
    assert (only["group"], only["samples"], only["reward_std"]) == (0, 4, pytest.approx(0.5))


def test_every_step_by_task_group_lists_the_newest_step_first_then_its_groups(client, owner_run):
    alice, run = owner_run
    _steps(run, {1: [_sample(1, 0.0, 0.0, "s1g1"), _sample(0, 0.0, 0.0, "s1g0")]})
    _steps(run, {2: [_sample(1, 0.0, 0.0, "s2g1"), _sample(0, 0.0, 0.0, "s2g0")]})
    client.force_login(alice)
    _, body = _get(client, run, step="all")
    assert [i["response"] for i in body["items"]] == ["s2g0", "s2g1", "s1g0", "s1g1"]
    assert [(g["step"], g["group"]) for g in body["groups"]] == [(1, 0), (1, 1), (2, 0), (2, 1)]


def test_it_sorts_by_reward_and_advantage_with_nulls_last(client, owner_run):
    alice, run = owner_run
    rows = [
        _sample(0, 0.2, 0.5, "r02"),
        _sample(0, 1.0, None, "r10"),
        _sample(1, 0.6, -0.9, "r06"),
        _sample(1, 0.0, 1.4, "r00"),
    ]
    _steps(run, {2: rows})
    client.force_login(alice)
    order = {}
    for sort in ("-reward", "reward", "-advantage", "advantage"):
        _, body = _get(client, run, sort=sort)
        order[sort] = [i["response"] for i in body["items"]]
    assert order["-reward"] == ["r10", "r06", "r02", "r00"]
    assert order["reward"] == ["r00", "r02", "r06", "r10"]
    assert order["-advantage"] == ["r00", "r02", "r06", "r10"]  # r10's advantage is null: last
    assert order["advantage"] == ["r06", "r02", "r00", "r10"]


def test_it_searches_prompt_response_and_truth_over_every_step(client, owner_run):
    alice, run = owner_run
    _steps(run, {1: [_sample(0, 0.0, 0.0, "I think 41")], 2: [_sample(3, 1.0, 0.0, "answer 6")]})
    client.force_login(alice)
    _, body = _get(client, run, step="all", q="THINK")
    assert [(i["step"], i["response"]) for i in body["items"]] == [(1, "I think 41")]
    _, body = _get(client, run, step="all", q="3+3")  # in the prompt
    assert [i["step"] for i in body["items"]] == [2]
    _, body = _get(client, run, step="all", sort="-response_length")
    assert [i["response"] for i in body["items"]] == ["I think 41", "answer 6"]
    _, body = _get(client, run, step="all", q="nowhere")
    assert body["total"] == 0 and body["items"] == []


def test_it_pages_the_rollouts_of_a_step(client, owner_run):
    alice, run = owner_run
    _steps(run, {5: [_sample(i // 8, i / 100, 0.0, f"resp{i}") for i in range(PAGE_SIZE + 5)]})
    client.force_login(alice)
    _, first = _get(client, run)
    _, second = _get(client, run, page="2")
    assert (first["total"], first["pages"], len(first["items"]), len(second["items"])) == (
        PAGE_SIZE + 5,
        2,
        PAGE_SIZE,
        5,
    )
    seen = [i["response"] for i in first["items"] + second["items"]]
    assert sorted(seen) == sorted(f"resp{i}" for i in range(PAGE_SIZE + 5))


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"sort": "rewards"}, "sort: must be one of group, -reward"),
        ({"step": "last"}, "step: must be an explorer step or 'all'"),
        ({"page": "0"}, "page: must be a page number"),
        ({"q": "x" * 201}, "q: the search text is 201 characters"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(client, owner_run, params, names):
    alice, run = owner_run
    client.force_login(alice)
    status, body = _get(client, run, **params)
    assert status == 400
    assert body["detail"].startswith(names)


def test_another_users_rollouts_are_refused_and_staff_sees_them(client, owner_run):
    _, run = owner_run
    _steps(run, {1: [_sample(0, 1.0, 0.0, "secret-of-alice")]})
    client.force_login(make_user("bob"))
    status, body = _get(client, run)
    assert status == 403 and "secret-of-alice" not in str(body)
    assert client.get(f"/runs/{run.pk}/rollouts/").status_code == 403
    client.force_login(make_user("root", staff=True))
    status, body = _get(client, run)
    assert status == 200 and body["items"][0]["response"] == "secret-of-alice"
    page = client.get(f"/runs/{run.pk}/rollouts/")
    assert page.status_code == 200 and b'id="rollout-explorer"' in page.content


def test_a_stored_samples_event_keeps_its_token_arrays_once_in_the_rollout_rows(owner_run):
    from rft_core.monitor import MonitorEvent
    from webapp.ingest.store import rows_of, store_events

    _, run = owner_run
    entry = _sample(1, 1.0, 0.5, "2 ok", trainer_logprobs=[-0.4, -0.3, -0.1, -0.2])
    event = MonitorEvent(run.key, "samples", "explorer", 3, {"samples": [entry]}, stage="rft")
    _, stored = store_events(run.key, rows_of(run.key, [("5-0", event)]))

    sample = RolloutSample.objects.get(run=run)
    assert sample.tokens == {
        "tokens": ["2", " ", "o", "k"],
        "logprobs": [-0.5] * 4,
        "trainer_logprobs": [-0.4, -0.3, -0.1, -0.2],
    }
    row = RunEvent.objects.get(run_key=run.key, stream_id="5-0")
    (kept,) = row.payload["samples"]
    assert not {"tokens", "logprobs", "trainer_logprobs"} & set(kept)
    assert (kept["response"], kept["reward"], kept["advantage"]) == ("2 ok", 1.0, 0.5)
    assert stored[0].payload == row.payload  # the live message carries what was stored


def test_the_trainers_logprobs_go_beside_the_tokens_of_the_sample_they_name(client, owner_run):
    from rft_core.monitor import MonitorEvent
    from webapp.ingest.store import rows_of, store_events

    alice, run = owner_run
    kept = [
        {**_sample(0, 1.0, 0.5, "ab"), "sample_index": 0},
        {**_sample(0, 0.0, -0.5, "xyz"), "sample_index": 1},
    ]
    trainer = [  # index 1 only; a list of the wrong length for index 0 is dropped
        {
            "explorer_step": 3,
            "sample_index": 1,
            "trainer_step": 2,
            "trainer_logprobs": [-0.25, -1.5, -0.5],
        },
        {"explorer_step": 3, "sample_index": 0, "trainer_step": 2, "trainer_logprobs": [-0.1]},
    ]
    events = [
        ("1-0", MonitorEvent(run.key, "samples", "explorer", 3, {"samples": kept}, stage="rft")),
        ("2-0", MonitorEvent(run.key, "samples", "trainer", 2, {"samples": trainer}, stage="rft")),
    ]
    store_events(run.key, rows_of(run.key, events))

    first, second = RolloutSample.objects.filter(run=run).order_by("id")  # no trainer rows
    assert "trainer_logprobs" not in first.tokens
    assert second.tokens["trainer_logprobs"] == [-0.25, -1.5, -0.5]
    assert second.tokens["logprobs"] == [-0.5, -0.5, -0.5]
    client.force_login(alice)
    _, body = _get(client, run, step=3)
    by_index = {item["sample_index"]: item for item in body["items"]}
    assert by_index[1]["tokens"]["trainer_logprobs"] == [-0.25, -1.5, -0.5]
    assert by_index[1]["trainer_step"] == 2


def test_a_dpo_trainers_pairs_are_rollouts_with_the_trainers_logprobs_alone(client, owner_run):
    from rft_core.demo import build_tokenizer
    from rft_core.experience import Experience
    from rft_core.explorer.rollout_samples import PAIR_INFO_KEY, mark_pairs, pair_samples
    from rft_core.monitor import MonitorEvent
    from webapp.ingest.store import rows_of, store_events

    alice, run = owner_run
    tokenizer = build_tokenizer()  # one token a character

    def ids(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    (pair,) = mark_pairs([Experience(ids("1+2=?"), ids("3"), rejected_ids=ids("4!"))], limit=2)
    # what the trainer's forward records (rft_core.trainer.recorded_logprobs.record_pairs)
    pair.info[PAIR_INFO_KEY] = {
        "chosen": [-0.5],
        "rejected": [-1.0, -2.0],
        "reference_sums": {"chosen": -0.75, "rejected": -2.5},
        "terms": {"dpo_chosen_reward": 0.025, "dpo_rejected_reward": -0.05, "dpo_margin": 0.075},
    }
    entries = pair_samples([pair], trainer_step=4, tokenizer=tokenizer)
    event = MonitorEvent(run.key, "samples", "trainer", 4, {"samples": entries}, stage="rft")
    store_events(run.key, rows_of(run.key, [("1-0", event)]))

    chosen, rejected = RolloutSample.objects.filter(run=run).order_by("id")
    assert (chosen.step, chosen.group, chosen.response, chosen.reward) == (4, 0, "3", 0.025)
    assert (rejected.response, rejected.reward, rejected.response_length) == ("4!", -0.05, 2)
    # no rollout engine sampled them: the token view has the trainer's log-probs alone
    assert chosen.tokens == {"tokens": ["3"], "trainer_logprobs": [-0.5]}
    assert rejected.tokens == {"tokens": ["4", "!"], "trainer_logprobs": [-1.0, -2.0]}
    client.force_login(alice)
    _, body = _get(client, run)
    assert [(i["side"], i["logprob_sum"], i["reference_logprob_sum"]) for i in body["items"]] == [
        ("chosen", -0.5, -0.75),
        ("rejected", -3.0, -2.5),
    ]
    assert body["items"][0]["reward_parts"]["dpo_margin"] == 0.075
