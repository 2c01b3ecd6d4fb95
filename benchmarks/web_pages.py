"""Latency and SQL query count of the dashboard's main pages on a seeded database.

Seeds 1,000 experiments, 10,000 runs and 1,000,000 metric points (``bulk_create`` in batches)
into a database of its own: a SQLite file in a temporary directory, and/or a PostgreSQL
database ``rft_bench_<pid>`` created on the server of ``--postgres`` and dropped after. Then it
requests each page in-process with Django's test ``Client`` (signed in as the seeded user, who
owns every experiment) and prints p50/p95 latency over ``--repeat`` requests and the number of
SQL queries of one request (``CaptureQueriesContext``):

- the experiment list (``/experiments/``), an experiment page (``/experiments/<id>/``, its run
  list), a run page (``/runs/<id>/``), the metrics API (a page of 5,000 points,
  ``/api/v1/runs/<id>/metrics/?name=...&limit=5000``), and the admin's run and audit lists;
- the runs table (``/runs/``: page 1 and page 100 of 10k runs, filtered by a tag, by status
  sorted by eval accuracy, a search, sorted by the latest reward and by duration);
- the downloads of the heavy run (100,000 points): ``metrics.csv`` and ``metrics.json``, read
  to the last byte of the stream, as MB/s (p50 over ``--repeat`` downloads, at least 3);
- where a page shows a number of rows the caller chooses, the same page again with 10x more rows
  (a search finding one experiment against a full list page; an experiment with 100 runs
  against one with 10; 5,000 metric points against 500), so the table shows whether the query
  count grows with the rows shown (it should not).

A page that does not exist yet (404) or fails is listed with its status instead of figures.
Each backend runs in a child process of this script (Django's settings are read once per
process). Nothing here asserts a time; it prints figures::

    .venv/bin/python benchmarks/web_pages.py                      # SQLite and PostgreSQL
    .venv/bin/python benchmarks/web_pages.py --backend sqlite --repeat 50
    .venv/bin/python benchmarks/web_pages.py --experiments 100 --runs 1000 --points 100000
    .venv/bin/python benchmarks/web_pages.py --json figures.json
    .venv/bin/python benchmarks/web_pages.py --runs 110 --points 200000 --only metrics.

``--only`` measures the pages whose name holds the given text (``metrics.``: the two
downloads; the heavy run still gets its 100,000 points from 200,000).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POSTGRES = "postgres://postgres@127.0.0.1:5432/test"
BATCH = 5_000
METRIC_NAMES_HEAVY = ("actor/pg_loss", "critic/score/mean", "response_length/mean", "actor/kl")
METRIC_NAMES = (
    *METRIC_NAMES_HEAVY,
    "eval/arithmetic-eval/accuracy/mean@1",
    "rollout/reward/mean",  # the runs table's reward column
)
RUN_TAGS = 20  # run i is tagged run-tag-(i % 20), and every third also "sweep"
STATUSES = ("succeeded", "failed", "cancelled", "lost", "succeeded", "succeeded")


@dataclass
class Figure:
    page: str
    url: str
    rows: str
    status: int
    p50_ms: float | None = None
    p95_ms: float | None = None
    queries: int | None = None
    bytes: int | None = None
    mb_s: float | None = None  # a download: MB (10^6 bytes) per second of its p50
    cpu_ms: float | None = None  # a download: this process's CPU time (median; a loaded
    # machine stretches the wall time, less the CPU time)


# ------------------------------------------------------------------ seeding (child process)


def seed(n_experiments: int, n_runs: int, n_points: int) -> dict:
    """Write the rows; return the ids the measured pages use."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.db.models import OuterRef, Subquery

    from webapp.audit.models import AuditEvent
    from webapp.experiments.models import Experiment, ExperimentVersion, Tag
    from webapp.runs.models import MetricPoint, Run
    from webapp.runs.telemetry import update_latest_reward

    config_yaml = (ROOT / "examples" / "demo" / "grpo_demo.yaml").read_text()
    import yaml

    config = yaml.safe_load(config_yaml)
    User = get_user_model()
    user = User.objects.create_user("bench", password="bench-password-123")
    other = User.objects.create_user("someone-else", password="bench-password-123")
    with transaction.atomic():
        tags = Tag.objects.bulk_create([Tag(name=f"tag-{i}") for i in range(20)])
        experiments = Experiment.objects.bulk_create(
            [
                Experiment(
                    owner=user,
                    name=f"experiment-{i:05d}",
                    project=f"project-{i % 25}",
                    description=f"benchmark experiment {i}",
                    config_yaml=config_yaml,
                    config=config,
                )
                for i in range(n_experiments)
            ],
            batch_size=BATCH,
        )
        ExperimentVersion.objects.bulk_create(
            [
                ExperimentVersion(
                    experiment=e, number=1, config_yaml=config_yaml, config=config, author=user
                )
                for e in experiments
            ],
            batch_size=BATCH,
        )
        through = Experiment.tags.through
        through.objects.bulk_create(
            [
                through(experiment_id=e.pk, tag_id=tags[(i + k) % len(tags)].pk)
                for i, e in enumerate(experiments)
                for k in (0, 7)
            ],
            batch_size=BATCH,
        )
        # Experiment 0 gets 100 runs, experiment 1 exactly 10; the rest round-robin.
        big, small, rest = experiments[0], experiments[1], experiments[2:]
        owners = [big] * min(100, n_runs) + [small] * 10
        owners += [rest[i % len(rest)] for i in range(max(0, n_runs - len(owners)))]
        numbers: dict[int, int] = {}
        runs = []
        now = time.time()
        for i, experiment in enumerate(owners):
            numbers[experiment.pk] = numbers.get(experiment.pk, 0) + 1
            runs.append(
                Run(
                    experiment=experiment,
                    number=numbers[experiment.pk],
                    status=STATUSES[i % len(STATUSES)],
                    config_yaml=config_yaml,
                    config=config,
                    experiment_version=1,
                    launched_by=user,
                    submission_id=f"raysubmit_bench{i:06d}",
                    job_dir=f"/tmp/rft-bench/run-{i}",
                    total_steps=30,
                    step=30,
                    last_eval_accuracy=(i % 100) / 100,
                    best_eval_accuracy=(i % 100) / 100 + 0.01,
                )
            )
        runs = Run.objects.bulk_create(runs, batch_size=BATCH)
        run_tags = Tag.objects.bulk_create(
            [Tag(name=f"run-tag-{i}") for i in range(RUN_TAGS)] + [Tag(name="sweep")]
        )
        run_through = Run.tags.through
        run_through.objects.bulk_create(
            [run_through(run_id=r.pk, tag_id=run_tags[i % RUN_TAGS].pk) for i, r in enumerate(runs)]
            + [run_through(run_id=r.pk, tag_id=run_tags[-1].pk) for r in runs[::3]],
            batch_size=BATCH,
        )
        Experiment.objects.update(
            last_run=Subquery(
                Run.objects.filter(experiment=OuterRef("pk")).order_by("-number").values("pk")[:1]
            )
        )
        # One heavy run of the small experiment: 4 names x 25,000 points; the rest of the
        # points 10,000 a run (5 names x 2,000 steps) over as many runs as they fill.
        heavy = next(r for r in runs if r.experiment_id == small.pk)
        per_name_heavy = min(25_000, n_points // (2 * len(METRIC_NAMES_HEAVY)))
        plan = [(heavy, METRIC_NAMES_HEAVY, per_name_heavy)]
        left = n_points - per_name_heavy * len(METRIC_NAMES_HEAVY)
        others = (r for r in runs if r.pk != heavy.pk)
        while left > 0:
            steps = min(2_000, max(1, left // len(METRIC_NAMES)))
            plan.append((next(others), METRIC_NAMES, steps))
            left -= steps * len(METRIC_NAMES)
        written = 0
        batch: list[MetricPoint] = []
        for run, names, steps in plan:
            for step in range(steps):
                for name in names:
                    batch.append(
                        MetricPoint(
                            run_id=run.pk,
                            name=name,
                            role="trainer",
                            stage="grpo",
                            step=step,
                            wall_time=now + step,
                            value=step * 0.001,
                        )
                    )
                    if len(batch) == BATCH:
                        MetricPoint.objects.bulk_create(batch)
                        written += len(batch)
                        batch = []
        if batch:
            MetricPoint.objects.bulk_create(batch)
            written += len(batch)
        # the column the ingestor keeps as it writes points (bulk_create bypasses it)
        update_latest_reward(Run.objects.all())
    # An audit trail to page through in the admin (rows as record() writes them, in bulk).
    AuditEvent.objects.bulk_create(
        [
            AuditEvent(
                actor_id=user.pk,
                actor_name=user.username,
                action="experiment.update",
                target_type="experiment",
                target_id=str(experiments[i % len(experiments)].pk),
                after={"name": experiments[i % len(experiments)].name},
                ip="127.0.0.1",
            )
            for i in range(10_000)
        ],
        batch_size=BATCH,
    )
    from django.db import connection

    if connection.vendor == "postgresql":
        # planner statistics, as autovacuum keeps them on a live database (a bulk load has
        # none until its next pass: the heavy run's 100k points then look like 136 rows, and
        # metrics.csv's ORDER BY becomes a sort spilled to disk instead of an index scan)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return {
        "user": user.pk,
        "other": other.pk,
        "big_experiment": big.pk,
        "small_experiment": small.pk,
        "heavy_run": heavy.pk,
        "run": runs[-1].pk,
        "metric": METRIC_NAMES_HEAVY[0],
        "metric_points": written,
        "heavy_points": per_name_heavy * len(METRIC_NAMES_HEAVY),
        "experiments": len(experiments),
        "runs": len(runs),
    }


# --------------------------------------------------------------- measuring (child process)


def measure(client, page: str, url: str, rows: str, repeat: int) -> Figure:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    response = client.get(url)
    if response.status_code != 200:
        return Figure(page, url, rows, response.status_code)
    for _ in range(2):  # warm caches (templates, query plans)
        client.get(url)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    n_queries = len(queries)  # now: the next request's request_started resets the log
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        client.get(url)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    p95 = statistics.quantiles(times, n=20, method="inclusive")[18] if len(times) > 1 else times[0]
    return Figure(
        page,
        url,
        rows,
        200,
        p50_ms=round(statistics.median(times), 1),
        p95_ms=round(p95, 1),
        queries=n_queries,
        bytes=len(response.content),
    )


def measure_download(client, page: str, url: str, rows: str, repeat: int) -> Figure:
    """A streamed download read to its last byte: latency percentiles of the whole body and
    MB/s at the median."""
    response = client.get(url)
    if response.status_code != 200:
        return Figure(page, url, rows, response.status_code)
    size = sum(len(piece) for piece in response.streaming_content)
    times, cpu = [], []
    for _ in range(max(3, repeat)):
        start, start_cpu = time.perf_counter(), time.process_time()
        got = sum(len(piece) for piece in client.get(url).streaming_content)
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
        assert got == size, (got, size)
    times.sort()
    p50 = statistics.median(times)
    p95 = statistics.quantiles(times, n=20, method="inclusive")[18]
    return Figure(
        page, url, rows, 200, p50_ms=round(p50, 1), p95_ms=round(p95, 1),
        bytes=size, mb_s=round(size / 1e6 / (p50 / 1000), 1),
        cpu_ms=round(statistics.median(cpu), 1),
    )  # fmt: skip


def _list_page_size() -> int | str:
    try:
        from webapp.experiments.views import PAGE_SIZE
    except ImportError:  # the list page is not there yet
        return "?"
    return PAGE_SIZE


def explain_slowest(client, page: str, url: str) -> None:
    """Each query of one request with its time, slowest first (to stderr)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    print(f"\n{page} {url}", file=sys.stderr)
    for query in sorted(queries.captured_queries, key=lambda q: -float(q["time"]))[:5]:
        print(f"  {float(query['time']) * 1000:7.1f} ms  {query['sql'][:300]}", file=sys.stderr)


def child(args: argparse.Namespace) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    logging.getLogger("django.request").setLevel(logging.ERROR)  # no line per missing page
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    start = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    ids = seed(args.experiments, args.runs, args.points)
    seeded_s = time.perf_counter() - start
    client = Client()
    client.force_login(get_user_model().objects.get(pk=ids["user"]))
    staff = Client()  # the admin pages, as a superuser
    staff.force_login(
        get_user_model().objects.create_superuser("bench-admin", password="bench-password-123")
    )
    per_page = _list_page_size()
    metric = f"/api/v1/runs/{ids['heavy_run']}/metrics/?name={ids['metric']}"
    pages = [
        ("experiment list", "/experiments/?q=experiment-00007", "1 (search)"),
        ("experiment list", "/experiments/", f"{per_page} (page 1)"),
        ("experiment list", "/experiments/?page=10", f"{per_page} (page 10)"),
        ("experiment page", f"/experiments/{ids['small_experiment']}/", "10 runs"),
        ("experiment page", f"/experiments/{ids['big_experiment']}/", "100 runs"),
        ("run page", f"/runs/{ids['heavy_run']}/", "100k points"),
        ("run page", f"/runs/{ids['run']}/", "no points"),
        ("metrics API", f"{metric}&limit=500", "500 points"),
        ("metrics API", f"{metric}&limit=5000", "5,000 points"),
    ]
    admin_pages = [
        ("admin runs", "/admin/runs/run/", "50 of 10k"),
        ("admin runs", "/admin/runs/run/?status__exact=failed", "50 failed"),
        ("admin experiments", "/admin/experiments/experiment/", "50 of 1k"),
        ("admin audit", "/admin/audit/auditevent/", "50 of 10k"),
    ]
    # The metrics API from the middle of the series: a range scan after a sequence number.
    from webapp.runs.models import MetricPoint

    middle = (
        MetricPoint.objects.filter(run_id=ids["heavy_run"], name=ids["metric"])
        .order_by("id")
        .values_list("id", flat=True)[10_000]
        if args.points >= 100_000
        else 0
    )
    pages.append(("metrics API", f"{metric}&limit=5000&after={middle}", "5,000 after 10k"))
    n_runs = f"{ids['runs'] // 1000}k" if ids["runs"] >= 1000 else str(ids["runs"])
    pages += [
        ("runs table", "/runs/", f"50 of {n_runs}"),
        ("runs table", "/runs/?page=100", "50 (page 100)"),
        ("runs table", "/runs/?tag=run-tag-3", "50 (a tag)"),
        ("runs table", "/runs/?status=failed&sort=-eval", "50 failed by eval"),
        ("runs table", "/runs/?q=experiment-00007", "1 exp. (search)"),
        ("runs table", "/runs/?tag=sweep&sort=-reward", "by reward (1/3)"),
        ("runs table", "/runs/?sort=-duration", "by duration"),
    ]
    if args.only:
        pages = [page for page in pages if args.only in page[0]]
        admin_pages = [page for page in admin_pages if args.only in page[0]]
    figures = [measure(client, *page, repeat=args.repeat) for page in pages]
    heavy = ids["heavy_run"]
    points = f"{ids['heavy_points']:,} points"
    downloads = [
        ("metrics.csv", f"/runs/{heavy}/metrics.csv", points),
        ("metrics.json", f"/runs/{heavy}/metrics.json", points),
    ]
    downloads = [page for page in downloads if args.only in page[0]]
    figures += [measure_download(client, *d, repeat=min(args.repeat, 10)) for d in downloads]
    figures += [measure(staff, *page, repeat=args.repeat) for page in admin_pages]
    if args.explain:
        for page, url, _rows in [*pages, *admin_pages]:
            explain_slowest(staff if page.startswith("admin") else client, page, url)
    from django.db import connection

    json.dump(
        {
            "backend": connection.vendor,
            "seeded": ids,
            "seed_s": round(seeded_s, 1),
            "figures": [asdict(f) for f in figures],
        },
        sys.stdout,
    )


# ------------------------------------------------------------------------- parent process


def run_backend(backend: str, args: argparse.Namespace) -> dict:
    env = {
        **os.environ,
        "ALLOWED_HOSTS": "testserver,127.0.0.1,localhost",
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
    }
    scale = [
        f"--experiments={args.experiments}",
        f"--runs={args.runs}",
        f"--points={args.points}",
        f"--repeat={args.repeat}",
        *(["--explain"] if args.explain else []),
        f"--only={args.only}",
    ]
    with tempfile.TemporaryDirectory(prefix="rft-bench-") as tmp:
        env["RFT_VAR_DIR"] = tmp
        if backend == "sqlite":
            env["DATABASE_URL"] = f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"
            return _child(env, scale)
        import psycopg

        name = f"rft_bench_{os.getpid()}"
        with psycopg.connect(args.postgres, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            base = args.postgres.rsplit("/", 1)[0]
            env["DATABASE_URL"] = f"{base}/{name}"
            return _child(env, scale)
        finally:
            with psycopg.connect(args.postgres, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _child(env: dict, scale: list[str]) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *scale],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_table(result: dict) -> None:
    seeded = result["seeded"]
    print(
        f"\n{result['backend']}: {seeded['experiments']:,} experiments, {seeded['runs']:,} runs, "
        f"{seeded['metric_points']:,} metric points (seeded in {result['seed_s']} s)"
    )
    header = f"{'page':<18} {'rows shown':<18} {'status':>6} {'p50 ms':>8} {'p95 ms':>8} "
    print(header + f"{'queries':>8} {'KiB':>8} {'MB/s':>7} {'CPU ms':>7}")
    for f in result["figures"]:
        if f["status"] != 200:
            print(f"{f['page']:<18} {f['rows']:<18} {f['status']:>6}   ({f['url']})")
            continue
        queries = "" if f["queries"] is None else f["queries"]
        rate = "" if f.get("mb_s") is None else f"{f['mb_s']:.1f}"
        cpu = "" if f.get("cpu_ms") is None else f"{f['cpu_ms']:.1f}"
        print(
            f"{f['page']:<18} {f['rows']:<18} {f['status']:>6} {f['p50_ms']:>8.1f} "
            f"{f['p95_ms']:>8.1f} {queries:>8} {f['bytes'] / 1024:>8.1f} {rate:>7} {cpu:>7}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server to create the DB on")
    parser.add_argument("--experiments", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=30, help="timed requests per page")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--explain", action="store_true", help="the slowest queries per page")
    parser.add_argument("--only", default="", help="only the pages whose name holds this")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.experiments < 2 or args.runs < 110:
        parser.error("at least 2 experiments and 110 runs (the 10- and 100-run experiments)")
    if args.child:
        child(args)
        return
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    results = [run_backend(backend, args) for backend in backends]
    for result in results:
        print_table(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
