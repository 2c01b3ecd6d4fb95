"""Collecting every config error of one load instead of stopping at the first.

A user who writes four bad values wants four messages, each naming its YAML path, in one go
(the CLI prints one line each; the web form puts each beside its field). The loader opens
``collecting()``; the checks that can go on after a bad value call ``report(err)``, which
records the error there and raises it where nothing collects (so a caller outside a load, and
every existing ``raise ConfigError`` path, behaves as before).

    with collecting() as found:
        ...                      # report(ConfigError("buffer.batch_size", "must be >= 1, got -4"))
    raise_found(found)           # nothing, the one error, or ConfigErrors with all of them

An error a global value causes in every stage that inherits it (``stages[i]`` leaves the section
out) is one problem: it is recorded once, naming the stages, at the global path.

Cross-field rules (``rft_core.config.validate`` and its satellites) call ``refuse(err)``: the
same, with the error marked ``cross_field``, so that a load whose build already failed can leave
such errors out (a rule may have tripped on a default standing in for a bad value).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from rft_core.errors import ConfigError, ConfigErrors

_found: ContextVar[list[ConfigError] | None] = ContextVar("config_problems", default=None)


@contextmanager
def collecting() -> Iterator[list[ConfigError]]:
    """Within it, ``report`` records errors into the yielded list instead of raising."""
    found: list[ConfigError] = []
    token = _found.set(found)
    try:
        yield found
    finally:
        _found.reset(token)


def is_collecting() -> bool:
    return _found.get() is not None


def report(err: ConfigError) -> None:
    """Record ``err`` where errors are being collected; raise it where they are not."""
    found = _found.get()
    if found is None:
        raise err
    for one in err.errors:
        same = next((e for e in found if e.path == one.path and _problem(e) == _problem(one)), None)
        if same is None:
            found.append(one)
        elif getattr(same, "inherited_by", None) and getattr(one, "inherited_by", None):
            _inherited_by_more(same, one.inherited_by)


def _problem(err: ConfigError) -> str:
    """The message without a stage's "(inherited by stage ...)" note: a global value that every
    stage inherits is one problem, said once (naming the stages), not once a stage."""
    return getattr(err, "problem", err.message)


def _inherited_by_more(err: ConfigError, stages: list[str]) -> None:
    err.inherited_by = [*err.inherited_by, *(s for s in stages if s not in err.inherited_by)]
    names = ", ".join(repr(s) for s in err.inherited_by)
    plural = "s" if len(err.inherited_by) > 1 else ""
    err.message = f"{err.problem} (inherited by stage{plural} {names})"
    err.args = (f"{err.path}: {err.message}",)


def refuse(err: ConfigError) -> None:
    """A cross-field rule's error: recorded (or raised) like :func:`report`'s, marked
    ``cross_field``. The rule then goes on with a stand-in value, or returns where what follows
    reads the value it could not derive (each rule's docstring says which)."""
    for one in err.errors:
        one.cross_field = True
    report(err)


def at_least(value: int | None, path: str, low: int) -> bool:
    """False (after reporting it) when ``value`` is below ``low``; None is left to the caller."""
    if value is not None and value < low:
        report(ConfigError(path, f"must be >= {low}, got {value}", value=value))
        return False
    return True


def raise_found(found: list[ConfigError], partial_config: object = None) -> None:
    """Raise what ``collecting`` gathered: the error itself when there is one. The error carries
    ``partial_config``, the config as far as it could be read (each bad value's default in its
    place), so a caller can run its own checks beside (the web's missing paths)."""
    if not found:
        return
    err = found[0] if len(found) == 1 else ConfigErrors(found)
    err.partial_config = partial_config
    raise err
