"""A web-submitted config is untrusted input: ``check_config`` is the one gate it passes, when an
experiment is saved and again when a run is launched.

    checked = check_config(config_yaml=text)      # or config={...} (the JSON API)
    checked.data            # the user's mapping in schema order, ${...} left unresolved
    checked.canonical_yaml  # that mapping as YAML (what Experiment.config_yaml stores)
    checked.config          # rft_core.config.Config, loaded and validated

In order, each failure an ``ActionError`` (400) whose ``errors`` map the YAML path to the message:

1. YAML is parsed with a SafeLoader subclass (OmegaConf's own loader, so ``1e-5`` is a float as
   for ``trinity run``), refused above ``RFT_YAML_MAX_BYTES`` and when aliases expand to more
   than ``RFT_YAML_MAX_ALIASES`` extra nodes (a billion-laughs document stops at composing).
2. Interpolations: only ``${oc.env:VAR[,default]}`` with VAR matching ``RFT_OC_ENV_ALLOWLIST``
   (fnmatch) and plain ``${section.key}`` references; other resolvers (``oc.decode``,
   ``oc.create``, ...) would run code paths or read state the page must not expose. Checked
   before loading, because loading resolves them.
3. ``rft_core.config.load_config_from_dict``: the CLI's validation, with its wording.
4. Registered names (workflows, rewards, advantage fns, policy losses and their arguments),
   against the table ``rft_core/config/registered_names.json``: the registries themselves
   import torch, which the web process must not (the table is generated from them, and a core
   test fails when it is stale). There is no dotted-import path anywhere: a name is either in
   the table or refused. A deployment that sets ``RFT_PLUGIN_DIRS`` loads those plugins and
   checks against the live registries instead (``registered_names``).
5. Paths resolve (``os.path.realpath``: symlinks and ``..``) inside ``RFT_ALLOWED_PATH_ROOTS``:
   model and critic model, chat template file, every taskset and eval taskset, every experience
   buffer (``sqlite:///`` included, a stage's own SFT/DPO data too) and ``checkpoint_root_dir``.
   Relative model/taskset paths resolve against ``RFT_WORK_DIR`` (where the job runs), relative
   buffer paths under the run's job dir (``rft_core.buffer.resolve_buffer_path``), and a relative
   ``checkpoint_root_dir`` against ``RFT_RUNS_DIR``: the web decides where runs write (a run's
   job dir is ``<checkpoint_root_dir>/run-<id>/<project>/<name>``). At launch the paths are
   resolved again against the owner's runs area and held to whose they are
   (``webapp.runs.claims``; ``webapp.runs.actions.launch_run``).
6. On save (``check_paths_exist``): the model, critic model, chat template and tasksets exist
   on this server. A path that will exist on the cluster's nodes only is the user's call: the
   refusal (``MissingPaths``, a 400 with every such path beside its field) is overridden by
   ``paths_exist_elsewhere`` (the form's checkbox, the API's flag). A launch does not check
   again: the run's own preflight names what is missing where it runs.

Every problem of one kind is reported at once (rft_core collects the config's errors:
``rft_core.config.problems``), each under its YAML path with the CLI's wording.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import os
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from omegaconf._yaml import get_yaml_loader

from rft_core.config import Config, load_config_from_dict
from rft_core.config.committed_names import committed_registered_names
from rft_core.config.fields import strip_optional
from rft_core.config.registered import check_registered_names
from rft_core.errors import ConfigError
from webapp.errors import ActionError

# ---------------------------------------------------------------- 1. safe, bounded YAML


class AliasBomb(yaml.YAMLError):
    """Aliases that expand past ``RFT_YAML_MAX_ALIASES`` (or refer to themselves)."""


class BoundedYamlLoader(get_yaml_loader(max_yaml_expanded_nodes=None)):
    """OmegaConf's SafeLoader with our alias limit (``max_aliases`` extra nodes after expansion)."""

    max_aliases = 100

    def construct_document(self, node: yaml.Node) -> Any:
        try:
            self._reject_recursive_aliases(node)
        except yaml.constructor.ConstructorError as err:
            raise AliasBomb("an alias refers to itself (recursive aliases are refused)") from err
        unique = self._unique_node_count(node)
        expanded = self._expanded_node_count(node, limit=unique + self.max_aliases + 1)
        if expanded - unique > self.max_aliases:
            raise AliasBomb(
                f"its aliases expand to more than {self.max_aliases} extra nodes "
                "(RFT_YAML_MAX_ALIASES); write the values out instead of repeating aliases"
            )
        return super().construct_document(node)


def parse_yaml(text: str, *, what: str = "the config") -> Any:
    """``text`` parsed safely within the size and alias limits, or an ActionError."""
    size = len(text.encode("utf-8"))
    limit = settings.RFT_YAML_MAX_BYTES
    if size > limit:
        raise ActionError(
            f"{what} is {size / 1024:.0f} KB; the limit is {limit / 1024:.0f} KB (RFT_YAML_MAX_BYTES)"
        )
    loader_cls = type(
        "Loader", (BoundedYamlLoader,), {"max_aliases": settings.RFT_YAML_MAX_ALIASES}
    )
    try:
        return yaml.load(text, Loader=loader_cls)  # noqa: S506 - a SafeLoader subclass
    except AliasBomb as err:
        raise ActionError(f"{what} is refused: {err}") from err
    except yaml.YAMLError as err:
        first = " ".join(str(err).split())
        raise ActionError(f"{what} is not valid YAML: {first}") from err


# ---------------------------------------------------------------- canonical form


def canonical_order(data: Any, cls: type = Config) -> Any:
    """``data`` with the keys of every schema section in the schema's order; free-form mappings
    as written. Unknown keys come first, as written: they are what loading refuses, and a refused
    config then reports the same key before and after the reordering."""
    if not isinstance(data, Mapping):
        return data
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    out: dict[str, Any] = {}
    for key in [*[k for k in data if k not in names], *[n for n in names if n in data]]:
        value = data[key]
        tp, _ = strip_optional(hints[key]) if key in hints else (None, False)
        if tp is not None and dataclasses.is_dataclass(tp):
            value = canonical_order(value, tp)
        elif tp is not None and typing.get_origin(tp) is list and isinstance(value, list):
            (item,) = typing.get_args(tp)
            if dataclasses.is_dataclass(item):
                value = [canonical_order(v, item) for v in value]
        out[key] = value
    return out


def canonical_yaml(data: Mapping[str, Any]) -> str:
    """The user's mapping as YAML in schema key order (what an experiment stores and exports)."""
    return yaml.safe_dump(
        canonical_order(data), sort_keys=False, allow_unicode=True, default_flow_style=False
    )


# ---------------------------------------------------------------- 2. interpolations

_OC_ENV = re.compile(r"\$\{oc\.env:\s*([^,{}$\s]*)\s*(?:,[^${}]*)?\}")
_REFERENCE = re.compile(r"\$\{\.*[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*|\[\d+\])*\}")
_RESOLVER = re.compile(r"\$\{\s*([\w.]+)\s*:")


def interpolation_errors(data: Any, path: str = "") -> dict[str, str]:
    """YAML path -> why, for every interpolation a web config may not use (see module doc)."""
    errors: dict[str, str] = {}
    if isinstance(data, Mapping):
        for key, value in data.items():
            errors.update(interpolation_errors(value, f"{path}.{key}" if path else str(key)))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            errors.update(interpolation_errors(value, f"{path}[{i}]"))
    elif isinstance(data, str) and "${" in data:
        if why := _interpolation_error(data):
            errors[path] = why
    return errors


NUL_MESSAGE = "contains a NUL character (\\x00), which no database text can hold; remove it"


def non_finite_errors(data: Any, path: str = "") -> dict[str, str]:
    """YAML path -> why, for every inf/NaN and every text with a NUL character: no config field
    wants one, and no JSON column (the experiment's and the run's parsed config) can store it
    (PostgreSQL refuses a NUL; a path with one fails in the OS)."""
    if isinstance(data, Mapping):
        bad_keys = [k for k in data if isinstance(k, str) and "\x00" in k]
        if bad_keys:
            return {
                f"{path}.{bad_keys[0]!r}" if path else repr(bad_keys[0]): f"a key {NUL_MESSAGE}"
            }
        items = ((f"{path}.{k}" if path else str(k), v) for k, v in data.items())
    elif isinstance(data, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(data))
    elif isinstance(data, float) and not math.isfinite(data):
        return {path: f"{data!r} is not a finite number; write a finite value"}
    elif isinstance(data, str) and "\x00" in data:
        return {path: NUL_MESSAGE}
    else:
        return {}
    errors: dict[str, str] = {}
    for where, value in items:
        errors.update(non_finite_errors(value, where))
    return errors


def _interpolation_error(text: str) -> str | None:
    allow = settings.RFT_OC_ENV_ALLOWLIST
    for match in _OC_ENV.finditer(text):
        var = match.group(1)
        if not any(fnmatch.fnmatchcase(var, pattern) for pattern in allow):
            return (
                f"{match.group(0)!r} reads the environment variable {var!r}, which a web config "
                f"may not read; allowed: {', '.join(allow) or 'none'} (RFT_OC_ENV_ALLOWLIST)"
            )
    rest = _REFERENCE.sub("", _OC_ENV.sub("", text))
    if "${" not in rest:
        return None
    resolver = _RESOLVER.search(rest)
    what = f"the resolver {resolver.group(1)!r}" if resolver else f"{text!r}"
    return (
        f"{what} is not allowed in a web config; use ${{oc.env:VAR,default}} "
        "or a ${section.key} reference"
    )


_OC_ENV_DEFAULT = re.compile(r"\$\{oc\.env:\s*([^,{}$\s]*)\s*(?:,([^${}]*))?\}")


def resolved_text(text: str) -> str | None:
    """What ``${oc.env:VAR,default}`` in ``text`` reads here (the form shows it beside the
    raw text); None when there is none, or when it reads a variable a web config may not."""
    if "${oc.env:" not in text or _interpolation_error(text):
        return None

    def env(match: re.Match) -> str:
        return os.environ.get(match.group(1), (match.group(2) or "").strip())

    out = _OC_ENV_DEFAULT.sub(env, text)
    return None if "${" in out else out


# ---------------------------------------------------------------- 5. paths

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def allowed_roots() -> list[str]:
    return [os.path.realpath(root) for root in settings.RFT_ALLOWED_PATH_ROOTS]


def resolve_path(value: str, base: str | Path) -> str:
    """Where ``value`` (relative to ``base``) really is: symlinks and ``..`` resolved."""
    return os.path.realpath(os.path.join(base, value))


def _outside(real: str, roots: list[str]) -> bool:
    return not any(os.path.commonpath([real, root]) == root for root in roots)


@dataclass(frozen=True)
class ConfigPath:
    where: str  # the YAML path
    value: str  # as written (a sqlite:/// prefix taken off)
    real: str = ""  # where it resolves (symlinks and ..)
    why: str = ""  # why it cannot be a path at all


def config_paths(cfg: Config, runs_dir: str | Path | None = None) -> list[ConfigPath]:
    """Every file and directory ``cfg`` names, in the config's order, with where it resolves
    (a relative checkpoint root under ``runs_dir``, default ``RFT_RUNS_DIR``; a launch passes
    the owner's runs area); a value that cannot be one (a URL, a project/group/name that is no
    directory name) with why."""
    work = settings.RFT_WORK_DIR
    runs_dir = runs_dir or settings.RFT_RUNS_DIR
    found: list[ConfigPath] = []

    def add(where: str, value: str | None, base: str | Path) -> None:
        if not value or not str(value).strip():
            return
        value = str(value)
        if value.startswith("sqlite:///"):
            value = value[len("sqlite:///") :]
        elif _URL.match(value):
            why = (
                f"{value!r}: a web config may name only files and directories (or sqlite:/// "
                "databases) inside the allowed roots, not a URL"
            )
            found.append(ConfigPath(where, value, why=why))
            return
        found.append(ConfigPath(where, value, real=resolve_path(value, base)))

    add("checkpoint_root_dir", cfg.checkpoint_root_dir, runs_dir)
    root = resolve_path(cfg.checkpoint_root_dir, runs_dir)
    for key in ("project", "group", "name"):
        value = str(getattr(cfg, key))
        if "/" in value or "\\" in value or value in (".", ".."):
            why = f"{value!r} cannot be a directory name; use letters, digits, _ or -"
            found.append(ConfigPath(key, value, why=why))
    add("model.model_path", cfg.model.model_path, work)
    if cfg.algorithm.algorithm_type == "ppo" or cfg.model.critic_model_path:
        add("model.critic_model_path", cfg.model.critic_model_path, work)
    add("model.chat_template_path", cfg.model.chat_template_path, work)
    buffers = [("", cfg.buffer, "")]
    buffers += [
        (f"stages[{i}].", s.buffer, s.stage_name) for i, s in enumerate(cfg.stages) if s.buffer
    ]
    for prefix, buffer, stage_name in buffers:
        ei = buffer.explorer_input
        tasksets = [("taskset", ei.taskset)] if ei.taskset is not None else []
        tasksets += [(f"tasksets[{j}]", ts) for j, ts in enumerate(ei.tasksets)]
        tasksets += [(f"eval_tasksets[{j}]", ts) for j, ts in enumerate(ei.eval_tasksets)]
        for key, ts in tasksets:
            add(f"{prefix}buffer.explorer_input.{key}.path", ts.path, work)
        eb = buffer.trainer_input.experience_buffer
        if eb is not None:
            parts = ["run-0", cfg.project, cfg.group, cfg.name, stage_name or "stage", "buffer"]
            job_buffer = Path(root).joinpath(*[p for p in parts if p])
            add(f"{prefix}buffer.trainer_input.experience_buffer.path", eb.path, job_buffer)
    return found


def path_errors(cfg: Config) -> dict[str, str]:
    """YAML path -> why, for every path of ``cfg`` outside the allowed roots."""
    roots = allowed_roots()
    errors: dict[str, str] = {}
    for path in config_paths(cfg):
        if path.why:
            errors[path.where] = path.why
        elif _outside(path.real, roots):
            errors[path.where] = (
                f"{path.value!r} resolves to {path.real}, outside the allowed roots "
                f"({', '.join(roots) or 'none'}; RFT_ALLOWED_PATH_ROOTS)"
            )
    return errors


# ---------------------------------------------------------------- the gate


@dataclass(frozen=True)
class CheckedConfig:
    data: dict[str, Any]  # the user's mapping in schema order, interpolations unresolved
    canonical_yaml: str
    config: Config  # loaded and validated


# the checkbox of the form, the flag of the API: a missing path will exist on the cluster's nodes
PATHS_EXIST_ELSEWHERE = "paths_exist_elsewhere"
# the inputs a run reads (what it writes, buffers and checkpoints, need not exist before)
_READ_PATHS = re.compile(
    r"^(stages\[\d+\]\.)?(model\.(model_path|critic_model_path|chat_template_path)"
    r"|buffer\.explorer_input\.(taskset|tasksets\[\d+\]|eval_tasksets\[\d+\])\.path)$"
)


class MissingPaths(ActionError):
    """Paths the config reads that do not exist here (``missing``, YAML paths), maybe beside
    other errors; ``paths_exist_elsewhere`` saves anyway."""

    def __init__(self, message: str, *, errors: dict[str, str], missing: list[str]):
        super().__init__(message, errors=errors)
        self.missing = missing

    def as_json(self) -> dict:
        return {**super().as_json(), "missing_paths": self.missing}


def _in_runs_areas(real: str) -> bool:
    """Whether ``real`` lies under ``<RFT_RUNS_DIR>/users/`` (``webapp.runs.claims``' runs
    areas). Whether such a path exists is never told at save: it would let one user probe
    another's runs (a launch holds a run to its own area, ``claims.path_refusal``)."""
    users = os.path.join(os.path.realpath(settings.RFT_RUNS_DIR), "users")
    return real == users or real.startswith(users + os.sep)


def missing_path_errors(cfg: Config) -> dict[str, str]:
    """YAML path -> why, for every file or directory ``cfg`` reads that does not exist here
    (outside the users' runs areas, see ``_in_runs_areas``)."""
    errors: dict[str, str] = {}
    for path in config_paths(cfg):
        if path.why or not _READ_PATHS.match(path.where) or os.path.exists(path.real):
            continue
        if _in_runs_areas(str(path.real)):
            continue
        errors[path.where] = (
            f"{path.value!r} does not exist on this server ({path.real}); if it will exist on "
            "the cluster's nodes, save with \"these paths will exist on the cluster's nodes\" "
            f"({PATHS_EXIST_ELSEWHERE})"
        )
    return errors


def check_paths_exist(cfg: Config) -> None:
    """A ``MissingPaths`` naming every path ``cfg`` reads that does not exist here."""
    errors = missing_path_errors(cfg)
    if errors:
        path, message = next(iter(errors.items()))
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise MissingPaths(f"{path}: {message}{more}", errors=errors, missing=list(errors))


def raise_errors(errors: Mapping[str, str]) -> None:
    """An ActionError naming the first problem (``path: message``, as the CLI prints it)."""
    if not errors:
        return
    path, message = next(iter(errors.items()))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    raise ActionError(f"{path}: {message}{more}" if path else message + more, errors=dict(errors))


def config_error(err: ConfigError) -> ActionError:
    """Every error of ``err`` (one or a ``ConfigErrors``) under its YAML path, CLI wording."""
    found = err.errors
    if len(found) == 1:
        return ActionError(str(err), errors={err.path: err.message} if err.path else {})
    errors: dict[str, str] = {}
    for one in found:
        key = one.path
        errors[key] = f"{errors[key]}; {one.message}" if key in errors else one.message
    return ActionError(f"{found[0]} (and {len(found) - 1} more)", errors=errors)


def load_data(data: Mapping[str, Any], *, report_missing_paths: bool = False) -> Config:
    """``rft_core``'s loading and validation of a mapping, its errors as an ActionError (with
    the paths that do not exist here beside them when ``report_missing_paths``)."""
    try:
        return load_config_from_dict(data)
    except ConfigError as err:
        refused = config_error(err)
        partial = getattr(err, "partial_config", None)
        missing = missing_path_errors(partial) if report_missing_paths and partial else {}
        if missing:
            errors = {
                **refused.errors,
                **{k: v for k, v in missing.items() if k not in refused.errors},
            }
            more = len(errors) - 1
            first = str(err.errors[0])
            refused = MissingPaths(
                f"{first} (and {more} more)", errors=errors, missing=list(missing)
            )
        raise refused from err


def check_config(
    *,
    config_yaml: str | None = None,
    config: Mapping[str, Any] | None = None,
    record_only: bool = False,
    report_missing_paths: bool = False,
) -> CheckedConfig:
    """Parse, check and load a web-submitted config (see the module doc for every rule).

    ``record_only``: the config of a run that ran elsewhere (a terminal's ``trinity run``, an
    imported job dir), kept as its record. Parsed, bounded and validated as any other, but its
    paths are not held to ``RFT_ALLOWED_PATH_ROOTS`` and its names not to the registered ones
    (a user's own plug-ins): the dashboard opens none of them, and launching it from the
    dashboard checks it in full.

    ``report_missing_paths`` (a save, unless the user says the paths will exist on the
    cluster's nodes): paths the config reads that do not exist here are refused too
    (``MissingPaths`` when they are the only problem)."""
    if (config_yaml is None) == (config is None):
        raise ActionError("give the config either as config_yaml (text) or as config (a mapping)")
    if config_yaml is not None:
        if not isinstance(config_yaml, str):
            raise ActionError("config_yaml must be a string holding YAML")
        data = parse_yaml(config_yaml)
    else:
        data = config
    if not isinstance(data, Mapping):
        raise ActionError(
            "the config must be a mapping of sections (mode, model, buffer, ...), got "
            f"{'nothing' if data is None else type(data).__name__}"
        )
    data = canonical_order(dict(data))
    text = canonical_yaml(data)
    if config is not None:
        parse_yaml(text, what="the config")  # the same size limit for a posted mapping
    raise_errors(interpolation_errors(data))
    raise_errors(non_finite_errors(data))
    cfg = load_data(data, report_missing_paths=report_missing_paths and not record_only)
    raise_errors(non_finite_errors(dataclasses.asdict(cfg)))  # an interpolation may resolve to one
    if not record_only:
        try:
            check_registered_names(cfg, registered_names())
        except ConfigError as err:
            raise config_error(err) from err
        raise_errors(path_errors(cfg))
        if report_missing_paths:
            check_paths_exist(cfg)
    return CheckedConfig(data=data, canonical_yaml=text, config=cfg)


def registered_names() -> dict[str, Any]:
    """What a web-submitted config may name: the built-ins (the committed table, no torch), or,
    when the deployment names plugin directories (``RFT_PLUGIN_DIRS``), the live registries
    after loading them. ``TRINITY_PLUGIN_DIRS`` is never read here."""
    if not settings.RFT_PLUGIN_DIRS:
        return committed_registered_names()
    from rft_core.plugins import load_plugins
    from rft_core.registries import registered_names_table

    load_plugins(settings.RFT_PLUGIN_DIRS)
    return registered_names_table()
