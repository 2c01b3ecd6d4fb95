"""Whose job dir is whose: the one rule every directory a user hands the dashboard as a job dir
passes (import, a terminal run's registration, a checkpoint's conversion, a launch's checkpoint
root), so that no user can take, read in or write into another user's runs.

    area = runs_area(user)        # <RFT_RUNS_DIR>/users/<user id>: where that user's runs live
    claim = claim_job_dir(actor, "/abs/job/dir", action="run.import")
    claim.path                    # the real path (symlinks and .. resolved)
    claim.audit()                 # {"job_dir": ..., "claim": "own runs area" | "group ..." | "staff"}

A user may claim a real path that is

1. inside ``RFT_ALLOWED_PATH_ROOTS`` (the dashboard reads the tree and writes converted weights
   into it);
2. not the job dir of a run of another user, nor a parent or a child of one (comparing real
   paths); and
3. inside their own runs area, or under a root ``RFT_SHARED_RUN_ROOTS`` grants one of their
   Django groups (how a team shares runs on purpose).

Staff may claim any path inside the allowed roots; the action's audit row then says
``"claim": "staff"`` (and which rule it set aside). A refusal is an ``ActionError`` with status
403 whose message names the rule, after one ``permission.denied`` audit row with the action
attempted and the path; the caller has written nothing yet. The runs area is named by the
user's id, never the username, so no username (``..``, ``a/b``, an id of someone else) can
collide with or spoof another user's area.

A run the dashboard placed itself (``origin`` dashboard: ``<root>/run-<id>/...``, rows from
before the runs areas included) keeps its job dir wherever it is, unless that is inside another
user's area or another user's earlier run owns it: converting its checkpoints is checked with
``placed_by_dashboard``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.db.models import Model, Q

from webapp.audit.record import Actor, record
from webapp.errors import ActionError
from webapp.runs.models import Run

USERS_DIR = "users"
OTHERS_RUN = "another user's run owns it"


@dataclass(frozen=True)
class Claim:
    path: Path  # real: symlinks and .. resolved
    basis: str  # why the user may claim it: own runs area, a group's root, staff, ...

    def audit(self) -> dict[str, str]:
        return {"job_dir": str(self.path), "claim": self.basis}


def runs_area(user) -> Path:
    """Where ``user``'s runs live: ``<RFT_RUNS_DIR>/users/<user id>`` (real path)."""
    return Path(os.path.realpath(settings.RFT_RUNS_DIR)) / USERS_DIR / str(user.pk)


def within(path: str | Path, root: str | Path) -> bool:
    """``path`` is ``root`` or below it (both already real)."""
    path, root = str(path), str(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def granted_roots(user) -> list[tuple[str, str]]:
    """(group, real root) of every ``RFT_SHARED_RUN_ROOTS`` root granted to a group of ``user``."""
    shared = settings.RFT_SHARED_RUN_ROOTS
    if not shared:
        return []
    groups = set(user.groups.values_list("name", flat=True))
    return [
        (group, os.path.realpath(root))
        for group, roots in shared.items()
        if group in groups
        for root in roots
    ]


def _spellings(real: str) -> set[str]:
    """``real`` as a job dir column may hold it: resolved, and under each configured root as
    written (a root behind a symlink, such as macOS's /tmp, stored unresolved by older rows)."""
    out = {real}
    for root in [*settings.RFT_ALLOWED_PATH_ROOTS, settings.RFT_RUNS_DIR]:
        written, resolved = os.path.abspath(root), os.path.realpath(root)
        if written != resolved and within(real, resolved):
            out.add(os.path.normpath(written + real[len(resolved) :]))
    return out


def foreign_runs(
    real: str, owner_id: int | None, *, below: bool = True, before: int | None = None
) -> list[Run]:
    """Runs not owned by ``owner_id`` whose real job dir is ``real``, above it, or (``below``)
    inside it; only those created before run ``before`` when given."""
    query = Q()
    for spelled in _spellings(real):
        query |= Q(job_dir__in=[spelled, *map(str, PurePosixPath(spelled).parents)])
        if below:
            query |= Q(job_dir__startswith=spelled.rstrip(os.sep) + os.sep)
    runs = Run.objects.filter(query).exclude(job_dir="").exclude(experiment__owner_id=owner_id)
    if before is not None:
        runs = runs.filter(pk__lt=before)
    found = []
    for run in runs.select_related("experiment"):  # the query is a superset (SQLite's LIKE)
        theirs = os.path.realpath(run.job_dir)
        if within(real, theirs) or (below and within(theirs, real)):
            found.append(run)
    return found


def _allowed_roots() -> list[str]:
    return [os.path.realpath(root) for root in settings.RFT_ALLOWED_PATH_ROOTS]


def _other_users_area(real: str, user) -> bool:
    users = Path(os.path.realpath(settings.RFT_RUNS_DIR)) / USERS_DIR
    if not within(real, users) or real == str(users):
        return False
    return Path(real).relative_to(users).parts[0] != str(user.pk)


def refuse(
    actor: Actor,
    action: str,
    message: str,
    *,
    field: str,
    path: str,
    target: Model | None = None,
) -> ActionError:
    """One ``permission.denied`` audit row for a refused claim; the 403 to raise."""
    after = {"attempted": action, field: path, "rule": message}
    if target is not None:
        record(actor, "permission.denied", target, after=after)
    else:
        record(actor, "permission.denied", target_type=field, after=after)
    return ActionError(message, errors={field: message}, status=403)


def refusal(
    user,
    real: str,
    *,
    what: str = "job dir",
    run: Run | None = None,
    placed_by_dashboard: bool = False,
    below: bool = True,
) -> tuple[str, str]:
    """(basis, "") when ``user`` may claim the real path ``real``, else ("", the rule it breaks)
    (see the module doc; ``claim_job_dir`` for the arguments). Writes nothing."""
    roots = _allowed_roots()
    if not placed_by_dashboard and not any(within(real, root) for root in roots):
        return "", (
            f"this {what} is outside the directories this dashboard may read "
            f"(RFT_ALLOWED_PATH_ROOTS: {os.pathsep.join(roots)}): {real}; put it in your runs "
            f"area {runs_area(user)} (trinity run: set checkpoint_root_dir, or "
            "TRINITY_CHECKPOINT_ROOT_DIR)"
        )
    before = run.pk if run is not None else None
    rivals = foreign_runs(real, user.pk, below=below, before=before)
    if user.is_staff:
        if rivals:
            return f"staff: {OTHERS_RUN} (run {', '.join(str(r.pk) for r in rivals)})", ""
        if not within(real, runs_area(user)):
            return "staff: outside their own runs area", ""
        return "own runs area", ""
    if rivals:
        return "", (
            f"this {what} belongs to another user's run: {real} is the job dir of a run of "
            "another user, or lies inside or above one; claim only your own job dirs, or ask "
            "staff to import this one"
        )
    area = runs_area(user)
    if within(real, area):
        return "own runs area", ""
    for group, root in granted_roots(user):
        if within(real, root):
            return f"root {root} granted to group {group}", ""
    if placed_by_dashboard and not _other_users_area(real, user):
        return "placed by the dashboard", ""
    granted = ", ".join(root for _, root in granted_roots(user)) or "none"
    return "", (
        f"this {what} is outside your runs area ({area}) and the roots granted to you "
        f"({granted}; RFT_SHARED_RUN_ROOTS): {real}"
    )


def claim_job_dir(
    actor: Actor,
    value: object,
    *,
    action: str,
    field: str = "job_dir",
    what: str = "job dir",
    target: Model | None = None,
    run: Run | None = None,
    placed_by_dashboard: bool = False,
    below: bool = True,
) -> Claim:
    """``value`` as a job dir ``actor`` may claim (see the module doc), or a 400 for a value that
    is no absolute path and an audited 403 naming the rule it breaks.

    ``run``: the claim is that run's own (a conversion): runs created after it are not its
    rivals. ``below=False``: a checkpoint root, whose runs get their own ``run-<id>`` dirs below
    it, so the job dirs already below it are not rivals."""
    text = str(value or "").strip()
    if not text:
        raise ActionError(f"{field}: required", errors={field: f"required: give the {what}"})
    if not os.path.isabs(text):
        msg = f"give an absolute path, got {text!r}"
        raise ActionError(f"{field}: {msg}", errors={field: msg})
    user = actor.user
    if user is None or not user.is_active:
        raise ActionError(f"sign in to claim a {what}", status=403)
    real = os.path.realpath(text)
    basis, rule = refusal(
        user, real, what=what, run=run, placed_by_dashboard=placed_by_dashboard, below=below
    )
    if rule:
        raise refuse(actor, action, rule, field=field, path=real, target=target)
    return Claim(Path(real), basis)


def path_refusal(user, real: str, *, writes: bool) -> str:
    """Why a launch of ``user``'s may not read (``writes``: write) the real path ``real``:
    it lies in another user's runs area, or (writing) in another user's run's job dir; "" when
    it may. Staff may."""
    if user.is_staff:
        return ""
    if _other_users_area(real, user):
        return f"{real} is inside another user's runs area"
    if writes and foreign_runs(real, user.pk, below=False):
        return f"{real} is inside the job dir of another user's run"
    return ""
