"""The JSON API (``/api/v1/``): thin views over the apps' actions.

Every object goes through the one access rule (``webapp.accounts.access``): lists are
``.visible_to(user)``, single objects ``authorize_hidden(...)``: a missing object and another
user's answer the same 404, so the API never tells anyone that an object they may not see
exists; the refusal of another user's is still audited (one ``permission.denied`` row), on every
endpoint alike. State changes are the actions' (``create_experiment``,
``launch_run``, ``cancel_run``, ``convert_checkpoint``, ``set_run_tags``, ``fork_run``,
``evaluate_checkpoints``, ...: the same functions the pages call), which check, act and audit;
errors a user can fix come back as ``{"detail", "errors": {yaml_path: message}}`` with a 4xx.

Metrics and logs page by sequence number (the row id): ``?after=<next_after of the last page>``;
each page is one range scan of the (run, name, id) / (run, id) index.
"""

from __future__ import annotations

import yaml
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers as drf_serializers
from rest_framework import status
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.access import authorize_hidden
from webapp.api import serializers as s
from webapp.api.errors import api_exception_handler
from webapp.audit.record import Actor
from webapp.checkpoints.actions import convert_checkpoint
from webapp.checkpoints.evaluation import evaluate_checkpoints
from webapp.checkpoints.forks import fork_config_yaml, fork_run
from webapp.checkpoints.models import Checkpoint
from webapp.errors import ActionError
from webapp.experiments.actions import create_experiment, update_experiment
from webapp.experiments.models import Experiment
from webapp.ingest.job_dir import import_job_dir
from webapp.runs.actions import cancel_run, launch_run
from webapp.runs.annotations import set_run_notes, set_run_tags
from webapp.runs.external import events_redis_url, finish_terminal_run, register_terminal_run
from webapp.runs.models import LogLine, MetricPoint, Run
from webapp.runs.progress import in_stage_order

METRICS_DEFAULT_LIMIT = 1000
LOGS_DEFAULT_LIMIT = 500
ERRORS = {400: s.ErrorSerializer, 403: s.ErrorSerializer, 404: s.ErrorSerializer}


class Pagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 500


class ApiView(APIView):
    renderer_classes = [JSONRenderer]

    def get_exception_handler(self):
        return api_exception_handler

    def actor(self) -> Actor:
        return Actor.from_request(self.request)

    def query(self, serializer_class: type[drf_serializers.Serializer]) -> dict:
        """The query string checked by ``serializer_class`` (a 400 naming the bad parameter)."""
        params = {k: v for k, v in self.request.query_params.items() if v != ""}
        checked = serializer_class(data=params)
        checked.is_valid(raise_exception=True)
        return checked.validated_data

    def body(self, serializer_class: type[drf_serializers.Serializer]) -> dict:
        if not isinstance(self.request.data, dict):
            raise drf_serializers.ValidationError("the request body must be a JSON object")
        checked = serializer_class(data=self.request.data)
        checked.is_valid(raise_exception=True)
        return checked.validated_data

    def paginated(self, queryset, serializer_class) -> Response:
        paginator = Pagination()
        page = paginator.paginate_queryset(queryset, self.request, view=self)
        return paginator.get_paginated_response(serializer_class(page, many=True).data)


def experiment_queryset(user):
    return (
        Experiment.objects.visible_to(user)
        .select_related("owner", "last_run")
        .prefetch_related("tags")
    )


def run_queryset(user):
    return Run.objects.visible_to(user).select_related("experiment").prefetch_related("tags")


class ExperimentListView(ApiView):
    @extend_schema(
        parameters=[s.ExperimentFilterSerializer],
        responses={200: s.ExperimentSerializer(many=True), 400: s.ErrorSerializer},
    )
    def get(self, request: Request) -> Response:
        """The experiments you may see (staff: all), newest first."""
        filters = self.query(s.ExperimentFilterSerializer)
        queryset = experiment_queryset(request.user)
        if "project" in filters:
            queryset = queryset.filter(project=filters["project"])
        if "tag" in filters:
            queryset = queryset.filter(tags__name=filters["tag"])
        if "search" in filters:
            term = filters["search"]
            queryset = queryset.filter(
                Q(name__icontains=term)
                | Q(description__icontains=term)
                | Q(project__icontains=term)
            )
        return self.paginated(queryset, s.ExperimentSerializer)

    @extend_schema(
        request=s.ExperimentWriteSerializer,
        responses={201: s.ExperimentDetailSerializer, **ERRORS, 409: s.ErrorSerializer},
    )
    def post(self, request: Request) -> Response:
        """Create an experiment from ``config_yaml`` (YAML text) or ``config`` (a mapping)."""
        data = self.body(s.ExperimentWriteSerializer)
        experiment = create_experiment(
            self.actor(),
            name=data["name"],
            config_yaml=data.get("config_yaml"),
            config=data.get("config"),
            project=data.get("project", ""),
            description=data.get("description", ""),
            tags=tuple(data.get("tags", ())),
            check_paths_exist=not data.get("paths_exist_elsewhere", False),
        )
        experiment = experiment_queryset(request.user).get(pk=experiment.pk)
        return Response(s.ExperimentDetailSerializer(experiment).data, status.HTTP_201_CREATED)


class ExperimentDetailView(ApiView):
    @extend_schema(responses={200: s.ExperimentDetailSerializer, **ERRORS})
    def get(self, request: Request, pk: int) -> Response:
        """One experiment with its config (canonical YAML and parsed), version and last run."""
        experiment = authorize_hidden(self.actor(), Experiment, pk, "experiment.view")
        experiment = experiment_queryset(request.user).get(pk=experiment.pk)
        return Response(s.ExperimentDetailSerializer(experiment).data)

    @extend_schema(
        request=s.ExperimentUpdateSerializer,
        responses={200: s.ExperimentDetailSerializer, **ERRORS, 409: s.ErrorSerializer},
    )
    def patch(self, request: Request, pk: int) -> Response:
        """Change fields; a changed config becomes a new version (``note`` describes it)."""
        actor = self.actor()
        experiment = authorize_hidden(actor, Experiment, pk, "experiment.update")
        data = self.body(s.ExperimentUpdateSerializer)
        tags = data.get("tags")
        experiment = update_experiment(
            actor,
            experiment,
            config_yaml=data.get("config_yaml"),
            config=data.get("config"),
            name=data.get("name"),
            project=data.get("project"),
            description=data.get("description"),
            tags=None if tags is None else tuple(tags),
            note=data.get("note", ""),
            check_paths_exist=not data.get("paths_exist_elsewhere", False),
        )
        experiment = experiment_queryset(request.user).get(pk=experiment.pk)
        return Response(s.ExperimentDetailSerializer(experiment).data)


class ExperimentLaunchView(ApiView):
    @extend_schema(
        request=None, responses={201: s.RunDetailSerializer, **ERRORS, 409: s.ErrorSerializer}
    )
    def post(self, request: Request, pk: int) -> Response:
        """Launch a run of the experiment's current config (queued; a worker submits it)."""
        actor = self.actor()
        experiment = authorize_hidden(actor, Experiment, pk, "run.launch")
        run = launch_run(actor, experiment)
        return Response(s.RunDetailSerializer(run).data, status.HTTP_201_CREATED)


class RunListView(ApiView):
    @extend_schema(
        parameters=[s.RunFilterSerializer],
        responses={200: s.RunSerializer(many=True), 400: s.ErrorSerializer},
    )
    def get(self, request: Request) -> Response:
        """The runs you may see, newest first (``?experiment=<id>&status=<status>&tag=<tag>``)."""
        filters = self.query(s.RunFilterSerializer)
        queryset = run_queryset(request.user)
        if "experiment" in filters:
            queryset = queryset.filter(experiment_id=filters["experiment"])
        if "status" in filters:
            queryset = queryset.filter(status=filters["status"])
        if "tag" in filters:
            queryset = queryset.filter(tags__name=filters["tag"])
        return self.paginated(queryset, s.RunSerializer)


class RunDetailView(ApiView):
    @extend_schema(responses={200: s.RunDetailSerializer, **ERRORS})
    def get(self, request: Request, pk: int) -> Response:
        """One run: status, times, stage and step, exit reason, config snapshot."""
        run = authorize_hidden(self.actor(), Run, pk, "run.view")
        return Response(s.RunDetailSerializer(run).data)

    @extend_schema(
        request=s.RunUpdateSerializer,
        responses={200: s.RunDetailSerializer, 400: s.ErrorSerializer, 404: s.ErrorSerializer},
    )
    def patch(self, request: Request, pk: int) -> Response:
        """Replace the run's ``tags`` and/or ``notes`` (yours only), each audited (``run.tags`` / ``run.notes``) as on the run page; both or neither
        are written."""
        actor = self.actor()
        wants_tags = isinstance(request.data, dict) and "tags" in request.data
        run = authorize_hidden(actor, Run, pk, "run.tags" if wants_tags else "run.notes")
        body = self.body(s.RunUpdateSerializer)
        with transaction.atomic():
            if "tags" in body:
                set_run_tags(actor, run, body["tags"])
            if "notes" in body:
                set_run_notes(actor, run, body["notes"])
        return Response(s.RunDetailSerializer(run_queryset(request.user).get(pk=run.pk)).data)


class RunCancelView(ApiView):
    @extend_schema(
        request=None, responses={200: s.RunDetailSerializer, **ERRORS, 409: s.ErrorSerializer}
    )
    def post(self, request: Request, pk: int) -> Response:
        """Cancel the run (a queued run never submits; a running one's Ray job is stopped)."""
        actor = self.actor()
        run = authorize_hidden(actor, Run, pk, "run.cancel")
        run = cancel_run(actor, run)
        return Response(s.RunDetailSerializer(run).data)


class RunRegisterView(ApiView):
    @extend_schema(
        request=s.RunRegisterSerializer,
        responses={201: s.RunRegisteredSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        """Register a run started in a terminal (``trinity run`` with RFT_DASHBOARD_URL and
        RFT_API_TOKEN set): a running run of yours, under the experiment named as its config;
        the answer says which key, Redis and deployment prefix to stream its events to. The job
        dir must be one you may claim (your runs area or a root granted to your group; never
        another user's run's): else a 403 naming the rule."""
        body = self.body(s.RunRegisterSerializer)
        run = register_terminal_run(
            self.actor(), config_yaml=body["config_yaml"], job_dir=body["job_dir"]
        )
        answer = {
            "run": s.RunSerializer(run).data,
            "key": run.key,
            "events_redis_url": events_redis_url(),
            "events_redis_prefix": settings.RFT_REDIS_PREFIX,
            "page": request.build_absolute_uri(run.get_absolute_url()),
        }
        return Response(answer, status.HTTP_201_CREATED)


class RunFinishView(ApiView):
    @extend_schema(
        request=s.RunFinishSerializer,
        responses={200: s.RunDetailSerializer, **ERRORS, 409: s.ErrorSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        """A terminal run's exit (0 succeeded, 130 cancelled, else failed with ``message``)."""
        actor = self.actor()
        run = authorize_hidden(actor, Run, pk, "run.finish")
        body = self.body(s.RunFinishSerializer)
        run = finish_terminal_run(
            actor, run, exit_code=body["exit_code"], message=body.get("message", "")
        )
        return Response(s.RunDetailSerializer(run).data)


class RunImportView(ApiView):
    @extend_schema(request=s.RunImportSerializer, responses={201: s.RunDetailSerializer, **ERRORS})
    def post(self, request: Request) -> Response:
        """Import a job dir: its monitor JSONL, logs and checkpoint tree become a run with its
        whole history (its checkpoints convertible like any other). The job dir must be one
        you may claim (your runs area or a root granted to your group; never another user's
        run's; staff: any inside the allowed roots): else a 403 naming the rule."""
        actor = self.actor()
        body = self.body(s.RunImportSerializer)
        experiment = None
        if "experiment" in body:
            experiment = authorize_hidden(actor, Experiment, body["experiment"], "run.import")
        run = import_job_dir(
            actor,
            job_dir=body["job_dir"],
            config_yaml=body.get("config_yaml"),
            experiment=experiment,
        )
        data = s.RunDetailSerializer(run).data
        data["skipped_lines"] = run.import_problems
        return Response(data, status.HTTP_201_CREATED)


class RunMetricsView(ApiView):
    @extend_schema(
        parameters=[s.MetricQuerySerializer],
        responses={
            200: inline_serializer(
                "MetricsResponse",
                {
                    "run": drf_serializers.IntegerField(),
                    "name": drf_serializers.CharField(required=False),
                    "names": drf_serializers.ListField(
                        child=drf_serializers.CharField(), required=False
                    ),
                    "points": drf_serializers.ListField(
                        child=drf_serializers.DictField(), required=False
                    ),
                    "next_after": drf_serializers.IntegerField(required=False),
                },
            ),
            **ERRORS,
        },
    )
    def get(self, request: Request, pk: int) -> Response:
        """Without ``name``: the run's metric names. With it: that metric's points after
        sequence ``after`` (``seq`` ascending, at most ``limit`` ≤ 5000) and ``next_after``."""
        run = authorize_hidden(self.actor(), Run, pk, "run.view")
        query = self.query(s.MetricQuerySerializer)
        if "name" not in query:
            names = (
                MetricPoint.objects.filter(run=run)
                .order_by("name")
                .values_list("name", flat=True)
                .distinct()
            )
            return Response({"run": run.pk, "names": list(names)})
        after = query["after"]
        rows = list(
            MetricPoint.objects.filter(run=run, name=query["name"], id__gt=after)
            .order_by("id")
            .values_list("id", "step", "value", "wall_time", "stage", "role")[
                : query.get("limit", METRICS_DEFAULT_LIMIT)
            ]
        )
        points = [
            {"seq": i, "step": st, "value": v, "wall_time": t, "stage": sg, "role": r}
            for i, st, v, t, sg, r in rows
        ]
        next_after = rows[-1][0] if rows else after
        return Response(
            {"run": run.pk, "name": query["name"], "points": points, "next_after": next_after}
        )


class RunLogsView(ApiView):
    @extend_schema(
        parameters=[s.LogQuerySerializer], responses={200: s.LogPageSerializer, **ERRORS}
    )
    def get(self, request: Request, pk: int) -> Response:
        """Log lines after sequence ``after`` (optionally of one ``actor`` / ``level``)."""
        run = authorize_hidden(self.actor(), Run, pk, "run.view")
        query = self.query(s.LogQuerySerializer)
        after = query["after"]
        lines = LogLine.objects.filter(run=run, id__gt=after)
        if "actor" in query:
            lines = lines.filter(actor=query["actor"])
        if "level" in query:
            lines = lines.filter(level__iexact=query["level"])
        rows = list(
            lines.order_by("id").values_list("id", "actor", "level", "stage", "wall_time", "text")[
                : query.get("limit", LOGS_DEFAULT_LIMIT)
            ]
        )
        out = [
            {"seq": i, "actor": a, "level": lv, "stage": sg, "wall_time": t, "text": text}
            for i, a, lv, sg, t, text in rows
        ]
        next_after = rows[-1][0] if rows else after
        return Response({"run": run.pk, "lines": out, "next_after": next_after})


class RunCheckpointsView(ApiView):
    @extend_schema(responses={200: s.CheckpointSerializer(many=True), **ERRORS})
    def get(self, request: Request, pk: int) -> Response:
        """The run's checkpoints (stage, step), with their Hugging Face conversion state."""
        run = authorize_hidden(self.actor(), Run, pk, "run.view")
        checkpoints = in_stage_order(run.config or {}, list(Checkpoint.objects.filter(run=run)))
        return Response(s.CheckpointSerializer(checkpoints, many=True).data)


class CheckpointConvertView(ApiView):
    @extend_schema(
        request=None, responses={202: s.CheckpointSerializer, **ERRORS, 409: s.ErrorSerializer}
    )
    def post(self, request: Request, pk: int) -> Response:
        """Convert the checkpoint to Hugging Face format (a worker does it; poll ``hf_status``).
        403 when its run's job dir is not one you may claim (another user's run owns it)."""
        actor = self.actor()
        checkpoint = authorize_hidden(actor, Checkpoint, pk, "checkpoint.convert")
        checkpoint = convert_checkpoint(actor, checkpoint)
        return Response(s.CheckpointSerializer(checkpoint).data, status.HTTP_202_ACCEPTED)


class CheckpointForkView(ApiView):
    @extend_schema(
        request=s.ForkSerializer,
        responses={201: s.RunDetailSerializer, **ERRORS, 409: s.ErrorSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        """Fork the checkpoint's run from it: a new queued run of the same experiment whose job
        dir starts with this ``global_step_<N>`` (weights, optimizer, LR schedule) and whose
        steps go on from N + 1, with the config given (``config_yaml`` or ``config``; neither:
        the parent's config, resuming). 409 when the checkpoint was pruned by retention
        (``trainer.max_checkpoints_to_keep``) or Redis / Ray do not answer."""
        actor = self.actor()
        checkpoint = authorize_hidden(actor, Checkpoint, pk, "run.fork")
        body = self.body(s.ForkSerializer)
        if "config" in body:
            config_yaml = yaml.safe_dump(body["config"], sort_keys=False, allow_unicode=True)
        else:
            config_yaml = body.get("config_yaml") or fork_config_yaml(checkpoint)
        run = fork_run(actor, checkpoint, config_yaml)
        return Response(s.RunDetailSerializer(run).data, status.HTTP_201_CREATED)


class RunEvaluationsView(ApiView):
    @extend_schema(responses={200: s.EvaluationSerializer(many=True), **ERRORS})
    def get(self, request: Request, pk: int) -> Response:
        """The run's evaluations, newest first, with their ``results`` once they succeeded."""
        run = authorize_hidden(self.actor(), Run, pk, "run.view")
        evaluations = run.evaluations.prefetch_related("checkpoints")
        return self.paginated(evaluations, s.EvaluationSerializer)

    @extend_schema(
        request=s.EvaluateSerializer,
        responses={201: s.EvaluationSerializer, **ERRORS, 409: s.ErrorSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        """Evaluate checkpoints of the run (one stage, on disk) on eval tasksets of its config:
        a ``mode: bench`` Ray job of its own (queued; poll ``status`` and ``results``)."""
        actor = self.actor()
        run = authorize_hidden(actor, Run, pk, "checkpoint.evaluate")
        body = self.body(s.EvaluateSerializer)
        found = {c.pk: c for c in Checkpoint.objects.filter(run=run, pk__in=body["checkpoints"])}
        if unknown := [i for i in body["checkpoints"] if i not in found]:
            message = f"not checkpoints of run #{run.number}: {unknown}"
            raise ActionError(f"checkpoints: {message}", errors={"checkpoints": message})
        chosen = [found[i] for i in dict.fromkeys(body["checkpoints"])]
        evaluation = evaluate_checkpoints(actor, run, chosen, body["tasksets"])
        return Response(s.EvaluationSerializer(evaluation).data, status.HTTP_201_CREATED)
