"""Give the demo user the demo experiment (settings.RFT_DEMO_CONFIG), so a new user's first
click can be Launch. Idempotent: when the user already has an experiment of that name, nothing
is added (their edits are kept). Run after ``ensure_demo_user`` (``make demo-user`` does both).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.audit.record import Actor
from webapp.errors import ActionError
from webapp.experiments.actions import create_experiment
from webapp.experiments.models import Experiment

DEMO_NAME = "grpo_demo"
DEMO_DESCRIPTION = (
    "The embedded demo: SFT warmup, then GRPO, on the tiny model and the synthetic arithmetic "
    "data of `trinity init-demo` (CPU only). Launch it as it is, or clone it and change it."
)


class Command(BaseCommand):
    help = "Give the demo user the demo experiment (idempotent)"

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="demo")
        parser.add_argument("--config", default=str(settings.RFT_DEMO_CONFIG))
        parser.add_argument("--name", default=DEMO_NAME)

    def handle(self, *args, username: str, config: str, name: str, **options) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(
                f"no user {username!r}; run `python manage.py ensure_demo_user` first"
            )
        existing = Experiment.objects.filter(owner=user, name=name).first()
        if existing is not None:
            self.stdout.write(
                f"demo experiment {name!r} of {username!r} already exists (id {existing.pk})"
            )
            return
        try:
            with open(config, encoding="utf-8") as f:
                text = f.read()
        except OSError as err:
            raise CommandError(f"cannot read the demo config {config}: {err}") from err
        try:
            experiment = create_experiment(
                Actor.system(),
                owner=user,
                name=name,
                config_yaml=text,
                description=DEMO_DESCRIPTION,
                tags=["demo"],
            )
        except ActionError as err:
            raise CommandError(f"the demo config {config} is refused: {err.message}") from err
        self.stdout.write(f"demo experiment {name!r} created for {username!r} (id {experiment.pk})")
