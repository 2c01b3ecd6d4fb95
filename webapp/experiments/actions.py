"""State changes of experiments, one function each: check permission, act, write one audit row.

Every config that reaches the database passed ``check_config`` (webapp/experiments/config_policy):
``Experiment.config_yaml`` is its canonical YAML and ``config`` its mapping, interpolations
unresolved. A save that changes the config adds an ``ExperimentVersion`` and bumps ``version``;
a save that changes only the name, project, description or tags does not. A refused call
writes nothing (each action is one transaction). Errors about the experiment's own fields are
keyed ``experiment.<field>`` (config errors are keyed by YAML path, so the two never clash).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import IntegrityError, transaction

from webapp.accounts.access import check
from webapp.audit.record import Actor, record
from webapp.errors import ActionError
from webapp.experiments.config_policy import NUL_MESSAGE, CheckedConfig, check_config
from webapp.experiments.models import Experiment, ExperimentVersion, Tag

NAME_MAX = 200
TAG_MAX = 64


def _owner_of(actor: Actor, owner: Any) -> Any:
    if owner is not None and not actor.is_system and owner != actor.user:
        raise ActionError("only the system may create an experiment for another user", status=403)
    user = owner if owner is not None else actor.user
    if user is None:
        raise ActionError("sign in to create an experiment", status=403)
    return user


def _clean_text(value: Any, field: str) -> str:
    """``value`` as text, refused when it holds a NUL character (no database text can)."""
    text = str(value or "")
    if "\x00" in text:
        raise ActionError(f"{field}: {NUL_MESSAGE}", errors={field: NUL_MESSAGE})
    return text


def _clean_name(name: Any, owner: Any, *, exclude_pk: int | None = None) -> str:
    name = _clean_text(name, "experiment.name").strip()
    if not name:
        raise ActionError(
            "experiment.name: required", errors={"experiment.name": "required: give a name"}
        )
    if len(name) > NAME_MAX:
        msg = f"at most {NAME_MAX} characters, got {len(name)}"
        raise ActionError(f"experiment.name: {msg}", errors={"experiment.name": msg})
    taken = Experiment.objects.filter(owner=owner, name=name)
    if exclude_pk is not None:
        taken = taken.exclude(pk=exclude_pk)
    if taken.exists():
        msg = f"you already have an experiment named {name!r}; pick another name"
        raise ActionError(f"experiment.name: {msg}", errors={"experiment.name": msg})
    return name


def clean_tags(tags: Iterable[str] | str, field: str = "experiment.tags") -> list[str]:
    """Tag names from a comma-separated text or a list: trimmed, unique, in order; a tag over
    TAG_MAX characters or holding a NUL is refused naming ``field`` (experiments' and runs')."""
    if isinstance(tags, str):
        tags = _clean_text(tags, field).split(",")
    out: list[str] = []
    for tag in tags:
        tag = _clean_text(tag, field).strip()
        if len(tag) > TAG_MAX:
            msg = f"a tag has at most {TAG_MAX} characters: {tag[:20]!r}..."
            raise ActionError(f"{field}: {msg}", errors={field: msg})
        if tag and tag not in out:
            out.append(tag)
    return out


def _set_tags(experiment: Experiment, names: list[str]) -> None:
    experiment.tags.set([Tag.objects.get_or_create(name=n)[0] for n in names])


def _checked(
    config_yaml: str | None, config: Mapping[str, Any] | None, *, check_paths_exist: bool = False
) -> CheckedConfig:
    """The config checked (with the paths it reads held to exist here: ``check_paths_exist``)."""
    return check_config(
        config_yaml=config_yaml, config=config, report_missing_paths=check_paths_exist
    )


def _summary(experiment: Experiment) -> dict[str, Any]:
    return {
        "name": experiment.name,
        "project": experiment.project,
        "version": experiment.version,
        "tags": sorted(t.name for t in experiment.tags.all()),
    }


def _create(
    actor: Actor,
    owner: Any,
    *,
    name: str,
    checked: CheckedConfig,
    project: str,
    description: str,
    tags: Iterable[str] | str,
    note: str,
) -> Experiment:
    name = _clean_name(name, owner)
    tag_names = clean_tags(tags)
    project = _clean_text(project, "experiment.project")
    description = _clean_text(description, "experiment.description")
    try:
        with transaction.atomic():
            experiment = Experiment.objects.create(
                owner=owner,
                name=name,
                project=(project or checked.config.project or "")[:200],
                description=description or "",
                config_yaml=checked.canonical_yaml,
                config=checked.data,
                version=1,
            )
            _set_tags(experiment, tag_names)
            ExperimentVersion.objects.create(
                experiment=experiment,
                number=1,
                config_yaml=checked.canonical_yaml,
                config=checked.data,
                author=actor.user,
                note=note[:200],
            )
    except IntegrityError as err:  # a concurrent create with the same name
        msg = f"you already have an experiment named {name!r}; pick another name"
        raise ActionError(f"experiment.name: {msg}", errors={"experiment.name": msg}) from err
    return experiment


def create_experiment(
    actor: Actor,
    *,
    name: str,
    config_yaml: str | None = None,
    config: Mapping[str, Any] | None = None,
    project: str = "",
    description: str = "",
    tags: Iterable[str] | str = (),
    owner: Any = None,
    check_paths_exist: bool = False,
) -> Experiment:
    """A new experiment of ``actor`` (``owner``: only the system actor may give another user).
    ``check_paths_exist`` (a user's save, unless they say the paths will exist on the cluster's
    nodes): the paths the config reads must exist here."""
    user = _owner_of(actor, owner)
    checked = _checked(config_yaml, config, check_paths_exist=check_paths_exist)
    return _create_audited(
        actor, user, name=name, checked=checked, project=project, description=description,
        tags=tags, note="created",
    )  # fmt: skip


def _create_audited(actor: Actor, owner: Any, **fields: Any) -> Experiment:
    """``_create`` and its ``experiment.create`` audit row, in one transaction."""
    with transaction.atomic():
        experiment = _create(actor, owner, **fields)
        record(actor, "experiment.create", experiment, after=_summary(experiment))
    return experiment


def experiment_for_outside_run(actor: Actor, checked: CheckedConfig) -> Experiment:
    """The actor's experiment that a run started outside the dashboard (a terminal's
    ``trinity run``, an imported job dir) goes under: the one named as the config's ``name``
    (and ``project``), created with that config when the actor has none by that name."""
    user = _owner_of(actor, None)
    name = (checked.config.name or "run")[:NAME_MAX]
    existing = Experiment.objects.filter(owner=user, name=name).first()
    if existing is not None:
        return existing
    return _create_audited(
        actor, user, name=name, checked=checked, project=checked.config.project or "",
        description="", tags=(), note="created for a run started outside the dashboard",
    )  # fmt: skip


def update_experiment(
    actor: Actor,
    experiment: Experiment,
    *,
    config_yaml: str | None = None,
    config: Mapping[str, Any] | None = None,
    name: str | None = None,
    project: str | None = None,
    description: str | None = None,
    tags: Iterable[str] | str | None = None,
    note: str = "",
    check_paths_exist: bool = False,
) -> Experiment:
    """Change an experiment; a changed config becomes its next version (``check_paths_exist``
    as for ``create_experiment``)."""
    check(actor, experiment, "experiment.update")
    checked = None
    if config_yaml is not None or config is not None:
        checked = _checked(config_yaml, config, check_paths_exist=check_paths_exist)
    new_name = (
        _clean_name(name, experiment.owner, exclude_pk=experiment.pk) if name is not None else None
    )
    tag_names = clean_tags(tags) if tags is not None else None
    project = _clean_text(project, "experiment.project") if project is not None else None
    description = (
        _clean_text(description, "experiment.description") if description is not None else None
    )
    note = _clean_text(note, "note")
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=experiment.pk)
        before = _summary(experiment)
        if new_name is not None:
            experiment.name = new_name
        if project is not None:
            experiment.project = project.strip()[:200]
        if description is not None:
            experiment.description = description
        changed_config = checked is not None and checked.canonical_yaml != experiment.config_yaml
        if changed_config:
            experiment.version += 1
            experiment.config_yaml = checked.canonical_yaml
            experiment.config = checked.data
            ExperimentVersion.objects.create(
                experiment=experiment,
                number=experiment.version,
                config_yaml=checked.canonical_yaml,
                config=checked.data,
                author=actor.user,
                note=(note or "edited")[:200],
            )
        try:
            with transaction.atomic():
                experiment.save()
        except IntegrityError as err:
            msg = f"you already have an experiment named {experiment.name!r}; pick another name"
            raise ActionError(f"experiment.name: {msg}", errors={"experiment.name": msg}) from err
        if tag_names is not None:
            _set_tags(experiment, tag_names)
        after = _summary(experiment)
        record(
            actor,
            "experiment.update",
            experiment,
            before=before,
            after={**after, "config_changed": changed_config},
        )
    return experiment


def delete_experiment(actor: Actor, experiment: Experiment) -> None:
    """Delete an experiment with its runs; refused (409) while one of its runs is active."""
    check(actor, experiment, "experiment.delete")
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=experiment.pk)
        active = experiment.runs.active().order_by("number").first()
        if active is not None:
            raise ActionError(
                f"run #{active.number} of {experiment.name!r} is {active.status}; cancel it "
                "before deleting the experiment",
                status=409,
            )
        before = {**_summary(experiment), "runs": experiment.runs.count()}
        record(actor, "experiment.delete", experiment, before=before)
        experiment.delete()


def _free_name(owner: Any, wanted: str) -> str:
    """``wanted``, or ``wanted (2)``, ``(3)``, ... : the first name ``owner`` has not used."""
    wanted = wanted[: NAME_MAX - 6]
    taken = set(
        Experiment.objects.filter(owner=owner, name__startswith=wanted).values_list(
            "name", flat=True
        )
    )
    if wanted not in taken:
        return wanted
    n = 2
    while f"{wanted} ({n})" in taken:
        n += 1
    return f"{wanted} ({n})"


def _clone(
    actor: Actor,
    source: Experiment,
    config_yaml: str,
    *,
    name: str | None,
    default_name: str,
    note: str,
) -> Experiment:
    """A new experiment of ``actor`` with ``config_yaml`` and ``source``'s project, description
    and tags (the caller records the audit row inside the same transaction)."""
    owner = _owner_of(actor, None)
    checked = _checked(config_yaml, None)
    return _create(
        actor,
        owner,
        name=name if name is not None else _free_name(owner, default_name),
        checked=checked,
        project=source.project,
        description=source.description,
        tags=[t.name for t in source.tags.all()],
        note=note,
    )


def clone_experiment(
    actor: Actor, experiment: Experiment, *, name: str | None = None
) -> Experiment:
    """A copy of ``experiment`` (its current config, description, tags) owned by ``actor``."""
    check(actor, experiment, "experiment.clone")
    with transaction.atomic():
        clone = _clone(
            actor,
            experiment,
            experiment.config_yaml,
            name=name,
            default_name=f"{experiment.name} copy",
            note=f"cloned from experiment {experiment.pk} v{experiment.version}",
        )
        after = {**_summary(clone), "from_experiment": experiment.pk}
        record(actor, "experiment.clone", clone, after=after)
    return clone


def clone_run_config(actor: Actor, run: Any, *, name: str | None = None) -> Experiment:
    """A new experiment of ``actor`` from the config snapshot ``run`` was launched with."""
    check(actor, run, "run.clone")
    source = run.experiment
    with transaction.atomic():
        clone = _clone(
            actor,
            source,
            run.config_yaml,
            name=name,
            default_name=f"{source.name} run {run.number}",
            note=f"cloned from run {run.pk} (experiment {source.pk} #{run.number})",
        )
        record(actor, "run.clone", run, after={**_summary(clone), "experiment": clone.pk})
    return clone
