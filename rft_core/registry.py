"""A named registry for every place where code is plugged in: workflows, reward functions,
advantage functions, policy losses, KL functions, rollout engines, experience buffers. A new
entry is one decorated function (or class) in one file. Registering a name twice is an error;
asking for an unknown name raises a ConfigError that lists the registered names and the closest
match. The config's choices for these fields come from the registries too, through the table
``rft_core/config/registered_names.json`` (built by ``rft_core.registries``, checked by ``rft_core.config.registered``).

Torch-free: registries of torch code live beside that code, not here."""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

from rft_core.errors import ConfigError, RFTError

T = TypeVar("T")


def closest_name(word: str, candidates: list[str], cutoff: float = 0.6) -> str | None:
    """The candidate a misspelt ``word`` most likely meant (case-insensitive), or None when none
    is close: of those difflib finds similar enough (``cutoff``), the fewest edits away, a swap
    of two neighbours counting as one (``gpro`` -> ``grpo``, not ``gspo``)."""
    lowered = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=len(lowered), cutoff=cutoff)
    # a shared ``_segment`` (``_workflow``, ``_strategy``, ``max_``) is no evidence that two
    # names are related: what differs must be similar too (add_strategy is not sample_strategy)
    close = [c for c in close if _core_similarity(word.lower(), c) >= cutoff]
    if not close:
        return None
    return lowered[min(close, key=lambda c: _edits(word.lower(), c))]  # min keeps difflib's order


def _core_similarity(a: str, b: str) -> float:
    """difflib's ratio of what differs between ``a`` and ``b`` once the ``_``-delimited
    segments they share are set aside; 1.0 when one is the other with a single segment added
    (``subset`` / ``subset_name``), 0 when more are (a more specific name is not a misspelling)."""
    left, right = a.split("_"), b.split("_")
    for segment in list(left):
        if segment in right:
            left.remove(segment)
            right.remove(segment)
    if not left or not right:
        return 1.0 if len(left) + len(right) == 1 else 0.0
    return difflib.SequenceMatcher(None, "_".join(left), "_".join(right)).ratio()


def _edits(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
    neighbouring characters, one edit each."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            cost = a[i - 1] != b[j - 1]
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


class Registry(Generic[T]):
    """``kind`` names what is registered ("workflow", "reward function") in error messages;
    ``path`` is the YAML key that selects an entry (used when the caller gives none).

    ``names()`` is sorted where users add entries (their import order means nothing), or with
    ``sort_names=False`` in registration order: for a built-in set whose order the module
    states (the default first, as the config's choices list it)."""

    def __init__(
        self,
        kind: str,
        path: str = "",
        *,
        sort_names: bool = True,
        builtin_modules: tuple[str, ...] = (),
    ) -> None:
        self.kind = kind
        self.path = path
        self.sort_names = sort_names
        self._entries: dict[str, T] = {}
        # modules of built-in entries that import the registry's own module: imported when the
        # registry is first read, so neither module imports the other at its top
        self._builtin_modules = builtin_modules

    def _load_builtins(self) -> None:
        modules, self._builtin_modules = self._builtin_modules, ()
        for module in modules:
            importlib.import_module(module)

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@registry.register("my_name")``."""

        def decorator(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: T) -> None:
        if not name or not isinstance(name, str):
            raise RFTError(f"a {self.kind} needs a non-empty string name, got {name!r}")
        if name in self._entries:
            raise RFTError(
                f"{self.kind} {name!r} of {describe(obj)} is already registered by "
                f"{describe(self._entries[name])}; pick another name"
            )
        self._entries[name] = obj

    def get(self, name: str, *, path: str | None = None) -> T:
        self._load_builtins()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            pass
        valid = self.names()
        close = closest_name(str(name), valid)
        hint = f" (did you mean {close!r}?)" if close else ""
        raise ConfigError(
            self.path if path is None else path,
            f"unknown {self.kind} {name!r}{hint}; registered: {', '.join(valid)}",
            value=name,
            allowed=valid,
        )

    def names(self) -> list[str]:
        self._load_builtins()
        return sorted(self._entries) if self.sort_names else list(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load_builtins()
        return name in self._entries


def describe(obj: object) -> str:
    """Where a registered object comes from, for a duplicate-name error: ``module.Name``, and
    the file of a user's plugin (``rft_core.plugins``: modules ``rft_plugins.*``)."""
    obj = getattr(obj, "fn", obj)  # advantage fns and policy losses are registered wrapped
    module = getattr(obj, "__module__", None) or type(obj).__module__
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    source = getattr(sys.modules.get(module), "__file__", None)
    plugin = module.startswith("rft_plugins.") and source
    return f"{module}.{qualname}" + (f" ({source})" if plugin else "")
