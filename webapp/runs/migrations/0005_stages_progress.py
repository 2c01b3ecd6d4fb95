from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runs", "0004_rollouts_sample_fields")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="step_times",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="[unix s, step] of the stage's newest steps (the ETA)",
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="phases",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="role -> {phase, step, since}: what each role does",
            ),
        ),
    ]
