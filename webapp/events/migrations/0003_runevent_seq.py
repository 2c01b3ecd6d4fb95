"""RunEvent.seq: the dense per-run sequence number (1, 2, 3, ... per run key in id order,
which is stream order), backfilled for the rows stored before it existed."""

from django.db import migrations, models


def backfill(apps, schema_editor):
    RunEvent = apps.get_model("events", "RunEvent")
    seq: dict[str, int] = {}
    batch = []
    for pk, key in RunEvent.objects.order_by("id").values_list("id", "run_key").iterator():
        seq[key] = seq.get(key, 0) + 1
        batch.append(RunEvent(pk=pk, seq=seq[key]))
        if len(batch) >= 1000:
            RunEvent.objects.bulk_update(batch, ["seq"])
            batch = []
    if batch:
        RunEvent.objects.bulk_update(batch, ["seq"])


class Migration(migrations.Migration):
    dependencies = [("events", "0002_runevent_stage_and_seq_index")]

    operations = [
        migrations.AddField(
            model_name="runevent",
            name="seq",
            field=models.PositiveBigIntegerField(null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="runevent",
            name="seq",
            field=models.PositiveBigIntegerField(
                help_text="1, 2, 3, ... per run key in stream order (assigned by the ingestor)"
            ),
        ),
        migrations.RemoveIndex(model_name="runevent", name="runevent_run_seq"),
        migrations.AddConstraint(
            model_name="runevent",
            constraint=models.UniqueConstraint(
                fields=("run_key", "seq"), name="runevent_unique_run_seq"
            ),
        ),
    ]
