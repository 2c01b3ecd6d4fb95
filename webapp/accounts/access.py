"""The one access rule of the dashboard, used by pages, JSON endpoints and WebSocket connects:

    a signed-in user sees and acts on the experiments they own (and their runs and
    checkpoints); staff see and act on all of them.

``authorize`` is what every view, API endpoint, consumer and action calls: a missing object is
a 404 (``Http404``), an object of another user a 403 (``PermissionDenied``) and one audit row
``permission.denied`` naming who asked for what. ``authorize_hidden`` is the same rule for
what must not even be known to exist by another user (downloads, a run's tags and notes, and
every object of the JSON API): their refusal is audited the same way and answered as the 404 of
a missing object.
"""

from __future__ import annotations

from typing import TypeVar

from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import Http404

from webapp.audit.record import Actor, record

M = TypeVar("M", bound=models.Model)


def owner_id_of(obj: models.Model) -> int | None:
    """Owner of an experiment, or of the experiment a run or checkpoint belongs to."""
    label = obj._meta.label_lower
    if label == "experiments.experiment":
        return obj.owner_id
    if label == "runs.run":
        return obj.experiment.owner_id
    if label == "checkpoints.checkpoint":
        return obj.run.experiment.owner_id
    raise TypeError(f"no access rule for {label}")


def can_access(user, obj: models.Model) -> bool:
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    return bool(user.is_staff or owner_id_of(obj) == user.pk)


def deny(actor: Actor, action: str, obj: models.Model | None = None, **target) -> None:
    """Audit a refused action, then raise the 403."""
    record(actor, "permission.denied", obj, after={"attempted": action}, **target)
    if obj is not None:
        what = f"{obj._meta.verbose_name} {obj.pk} belongs to another user"
    else:
        what = "this is not yours"
    raise PermissionDenied(f"permission denied: {what} ({action})")


def authorize(actor: Actor, model: type[M], pk, action: str) -> M:
    """The object ``pk`` of ``model`` if ``actor`` may do ``action`` on it (see module doc)."""
    try:
        obj = model._default_manager.get(pk=pk)
    except (model.DoesNotExist, ValueError, TypeError) as err:
        raise Http404(f"no {model._meta.verbose_name} {pk}") from err
    check(actor, obj, action)
    return obj


def authorize_hidden(actor: Actor, model: type[M], pk, action: str) -> M:
    """``authorize``, but another user's object answers 404 (after the same audit row)."""
    try:
        return authorize(actor, model, pk, action)
    except PermissionDenied as err:
        raise Http404(f"no {model._meta.verbose_name} {pk}") from err


def check(actor: Actor, obj: models.Model, action: str) -> None:
    """Raise (and audit) unless ``actor`` may do ``action`` on ``obj``; the system may do all."""
    if actor.is_system:
        return
    if not can_access(actor.user, obj):
        deny(actor, action, obj)
