"""``Run.latest_reward``: the runs table's reward column as a column of the run (kept by the
ingestor, ``webapp.runs.telemetry.update_latest_reward``) rather than two correlated
subqueries per row of every page; filled here for the runs already recorded."""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery
from django.db.models.functions import Coalesce

REWARD_METRICS = ("rollout/reward/mean", "critic/rewards/mean")  # telemetry.REWARD_METRICS


def fill(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    MetricPoint = apps.get_model("runs", "MetricPoint")

    def newest(name):
        points = MetricPoint.objects.filter(run=OuterRef("pk"), name=name).order_by("-id")
        return Subquery(points.values("value")[:1])

    Run.objects.update(latest_reward=Coalesce(*(newest(name) for name in REWARD_METRICS)))


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_fork_run_fork"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="latest_reward",
            field=models.FloatField(
                blank=True,
                null=True,
                help_text="the newest rollout/reward/mean (else critic/rewards/mean) point's "
                "value, kept by the ingestor (webapp.runs.telemetry) for the runs table",
            ),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
