"""List the runs whose job dir another user's earlier run already owns (the same dir, or one
inside or above it): what an import or registration made before the claim rule
(``webapp.runs.claims``) may have taken. Read-only; exits 1 when it finds any, so a deployment
can check after upgrading:

    python manage.py job_dir_conflicts
    run 42 (bob, import) /srv/rft/var/runs/checkpoints/run-7/demo/grpo_demo: owned by run 7 (alice)

Converting a listed run's checkpoints is refused already; staff decide whether to delete it.
"""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError

from webapp.runs.claims import foreign_runs
from webapp.runs.models import Run


class Command(BaseCommand):
    help = "List runs whose job dir another user's earlier run owns (exit 1 when any)"

    def handle(self, *args, **options) -> None:
        found = 0
        runs = Run.objects.exclude(job_dir="").select_related("experiment__owner").order_by("pk")
        for run in runs.iterator():
            owner = run.experiment.owner
            rivals = foreign_runs(os.path.realpath(run.job_dir), owner.pk, before=run.pk)
            if not rivals:
                continue
            found += 1
            owners = ", ".join(f"run {r.pk} ({r.experiment.owner.username})" for r in rivals)
            self.stdout.write(
                f"run {run.pk} ({owner.username}, {run.origin}) {run.job_dir}: owned by {owners}"
            )
        if found:
            raise CommandError(f"{found} run(s) hold a job dir another user's earlier run owns")
        self.stdout.write("no run holds a job dir another user's earlier run owns")
