"""What the API reads and writes. Output serializers mirror the models (read-only); input
serializers only check shapes and types — what a value means (a config's validity, a name
already taken) is the actions' business, and they answer with ``ActionError``."""

from __future__ import annotations

import time

from rest_framework import serializers

from webapp.checkpoints.models import Checkpoint, Evaluation
from webapp.experiments.models import Experiment
from webapp.runs.annotations import NOTES_MAX, TAGS_MAX
from webapp.runs.models import FINAL_STATUSES, Run, RunStatus
from webapp.runs.progress import progress_of

NAME_MAX = Experiment._meta.get_field("name").max_length
PROJECT_MAX = Experiment._meta.get_field("project").max_length
TAG_MAX = 64


class RunSerializer(serializers.ModelSerializer):
    experiment_name = serializers.CharField(source="experiment.name", read_only=True)
    is_final = serializers.SerializerMethodField()
    url = serializers.CharField(source="get_absolute_url", read_only=True)
    tags = serializers.SlugRelatedField(many=True, read_only=True, slug_field="name")

    class Meta:
        model = Run
        fields = [
            "id", "experiment", "experiment_name", "number", "status", "is_final", "key",
            "experiment_version", "stage", "step", "total_steps", "created", "started_at",
            "finished_at", "last_heartbeat", "cancel_requested_at", "exit_reason", "last_error",
            "last_eval_accuracy", "best_eval_accuracy", "submission_id", "job_dir", "origin",
            "url", "tags", "notes",
        ]  # fmt: skip
        read_only_fields = fields

    def get_is_final(self, run: Run) -> bool:
        return run.status in FINAL_STATUSES

    def to_representation(self, run: Run) -> dict:
        """The row, and its progress through its stages (``webapp.runs.progress``):
        ``stage_step`` / ``stage_total_steps`` (the step of the current stage), ``stage_index``
        of ``stage_count``, ``stage_fraction``, ``run_fraction``, ``stage_eta_s``, ``phase``."""
        data = super().to_representation(run)
        data.update(progress_of(run, time.time()))
        return data


class RunDetailSerializer(RunSerializer):
    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "config_yaml", "config"]
        read_only_fields = fields


class LastRunSerializer(serializers.ModelSerializer):
    class Meta:
        model = Run
        fields = ["id", "number", "status", "last_eval_accuracy", "best_eval_accuracy", "created"]
        read_only_fields = fields


class ExperimentSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    tags = serializers.SlugRelatedField(many=True, read_only=True, slug_field="name")
    last_run = LastRunSerializer(read_only=True)
    url = serializers.CharField(source="get_absolute_url", read_only=True)

    class Meta:
        model = Experiment
        fields = [
            "id", "name", "project", "description", "tags", "owner", "version", "last_run",
            "created", "updated", "url",
        ]  # fmt: skip
        read_only_fields = fields


class ExperimentDetailSerializer(ExperimentSerializer):
    class Meta(ExperimentSerializer.Meta):
        fields = [*ExperimentSerializer.Meta.fields, "config_yaml", "config"]
        read_only_fields = fields


class ExperimentWriteSerializer(serializers.Serializer):
    """Create: ``name`` and one of ``config_yaml`` (text) / ``config`` (a mapping)."""

    name = serializers.CharField(max_length=NAME_MAX)
    config_yaml = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    config = serializers.DictField(required=False)
    project = serializers.CharField(required=False, allow_blank=True, max_length=PROJECT_MAX)
    description = serializers.CharField(required=False, allow_blank=True)
    tags = serializers.ListField(
        child=serializers.CharField(max_length=TAG_MAX), required=False, max_length=50
    )
    paths_exist_elsewhere = serializers.BooleanField(
        required=False,
        default=False,
        help_text="save although a model or data path does not exist on this server "
        "(it will exist on the cluster's nodes)",
    )

    config_required = True

    def validate(self, attrs: dict) -> dict:
        given = [key for key in ("config_yaml", "config") if key in attrs]
        if len(given) == 2:
            raise serializers.ValidationError(
                {"config": "give config_yaml or config, not both"}, code="both"
            )
        if not given and self.config_required:
            raise serializers.ValidationError(
                {"config_yaml": "give the config, as config_yaml (YAML text) or config (a mapping)"}
            )
        return attrs


class ExperimentUpdateSerializer(ExperimentWriteSerializer):
    """Update (PATCH): any of the create fields, and a note for the new config version."""

    name = serializers.CharField(max_length=NAME_MAX, required=False)
    note = serializers.CharField(required=False, allow_blank=True, max_length=200)

    config_required = False

    def validate(self, attrs: dict) -> dict:
        attrs = super().validate(attrs)
        if not {key for key in attrs if key != "paths_exist_elsewhere"}:
            raise serializers.ValidationError("nothing to update: give at least one field")
        return attrs


class RunRegisterSerializer(serializers.Serializer):
    """A terminal's ``trinity run`` registering itself (``rft_core.monitor.dashboard``)."""

    config_yaml = serializers.CharField(trim_whitespace=False, help_text="the config as it ran")
    job_dir = serializers.CharField(max_length=1000, help_text="absolute path of its job dir")


class RunRegisteredSerializer(serializers.Serializer):
    run = RunSerializer()
    key = serializers.CharField(help_text="RFT_RUN_ID: stream the run's events under it")
    events_redis_url = serializers.CharField(help_text="RFT_EVENTS_REDIS_URL: stream there")
    events_redis_prefix = serializers.CharField(
        help_text="RFT_REDIS_PREFIX: the dashboard's deployment prefix of its Redis keys"
    )
    page = serializers.CharField(help_text="the run page's address")


class RunFinishSerializer(serializers.Serializer):
    exit_code = serializers.IntegerField(help_text="0 succeeded, 130 interrupted, else failed")
    message = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)


class RunImportSerializer(serializers.Serializer):
    """An existing job dir read into a run (``webapp.ingest.job_dir.import_job_dir``)."""

    job_dir = serializers.CharField(max_length=1000, help_text="absolute path of the job dir")
    experiment = serializers.IntegerField(
        required=False, help_text="your experiment to put it under (default: the config's name)"
    )
    config_yaml = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="its config (default: the job dir's config.yaml, else one naming the job dir)",
    )


class CheckpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = Checkpoint
        fields = [
            "id", "run", "stage", "step", "path", "size_bytes", "hf_status", "hf_path",
            "hf_progress", "hf_error", "pruned", "created", "updated",
        ]  # fmt: skip
        read_only_fields = fields


class RunUpdateSerializer(serializers.Serializer):
    """PATCH a run: its ``tags`` (the whole list, replacing the old one) and/or its ``notes``
    (the whole text); what a tag may be is ``webapp.runs.annotations``' business."""

    tags = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        help_text=f"the run's tags, replacing its tags (at most {TAGS_MAX}, {TAG_MAX} characters "
        "each; [] removes them all)",
    )
    notes = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text=f'the run\'s notes, replacing them (at most {NOTES_MAX:,} characters; "" '
        "clears them)",
    )

    def validate(self, attrs: dict) -> dict:
        if not attrs:
            raise serializers.ValidationError("nothing to update: give tags and/or notes")
        return attrs


class ForkSerializer(serializers.Serializer):
    """The fork's config: ``config_yaml`` (text) or ``config`` (a mapping); neither: the parent
    run's config as launched, resuming (``continue_from_checkpoint: true``)."""

    config_yaml = serializers.CharField(required=False, trim_whitespace=False)
    config = serializers.DictField(required=False)

    def validate(self, attrs: dict) -> dict:
        if "config_yaml" in attrs and "config" in attrs:
            raise serializers.ValidationError({"config": "give config_yaml or config, not both"})
        return attrs


class EvaluateSerializer(serializers.Serializer):
    """Checkpoints of the run (ids, one stage) and names of its eval tasksets to bench them on."""

    checkpoints = serializers.ListField(
        child=serializers.IntegerField(min_value=1), max_length=100, help_text="checkpoint ids"
    )
    tasksets = serializers.ListField(
        child=serializers.CharField(max_length=200),
        max_length=100,
        help_text="names of the run's buffer.explorer_input.eval_tasksets",
    )


class EvaluationSerializer(serializers.ModelSerializer):
    checkpoints = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    url = serializers.CharField(source="get_absolute_url", read_only=True)
    results = serializers.JSONField(
        read_only=True,
        help_text='{"<checkpoint id>": {"<taskset>": {"metric": "accuracy/mean@k", "value": x}}}',
    )

    class Meta:
        model = Evaluation
        fields = [
            "id", "run", "checkpoints", "tasksets", "status", "results", "error",
            "submission_id", "job_dir", "created", "finished_at", "url",
        ]  # fmt: skip
        read_only_fields = fields


class RunFilterSerializer(serializers.Serializer):
    experiment = serializers.IntegerField(required=False, min_value=1)
    status = serializers.ChoiceField(choices=RunStatus.values, required=False)
    tag = serializers.CharField(required=False, max_length=TAG_MAX)


class ExperimentFilterSerializer(serializers.Serializer):
    project = serializers.CharField(required=False, max_length=PROJECT_MAX)
    tag = serializers.CharField(required=False, max_length=TAG_MAX)
    search = serializers.CharField(required=False, max_length=200)


class PageQuerySerializer(serializers.Serializer):
    """``after`` (a sequence number: the ``next_after`` of the previous page) and ``limit``."""

    after = serializers.IntegerField(required=False, min_value=0, default=0)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=5000)


class MetricQuerySerializer(PageQuerySerializer):
    name = serializers.CharField(required=False, max_length=200)


class LogQuerySerializer(PageQuerySerializer):
    actor = serializers.CharField(required=False, max_length=64)
    level = serializers.CharField(required=False, max_length=10)


class MetricPageSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    name = serializers.CharField()
    points = serializers.ListField(child=serializers.DictField())
    next_after = serializers.IntegerField()


class MetricNamesSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    names = serializers.ListField(child=serializers.CharField())


class LogPageSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    lines = serializers.ListField(child=serializers.DictField())
    next_after = serializers.IntegerField()


class ErrorItemSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="YAML path or field (empty: the request as a whole)")
    message = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
    errors = serializers.DictField(child=serializers.CharField())
    error_list = ErrorItemSerializer(many=True, help_text="every error, in the order found")
