"""Loading a config: YAML file or dict -> overrides -> interpolation -> typed dataclasses -> validation.

OmegaConf does the YAML parsing (its loader reads ``1e-5`` as a float), the ``key=value``
overrides and the ``${oc.env:VAR,default}`` / ``${section.key}`` interpolation, on a plain
container that holds the user's values with the schema's defaults filled in beside them. The
step from that container to the dataclasses is our own small builder rather than OmegaConf's
structured mode, because structured mode loses the path of list items in its errors
(``format.n`` instead of ``buffer.explorer_input.eval_tasksets[1].format.n``), is case-sensitive
for enums and has no aliases; users of Trinity write ``sync_method: online`` and expect it to work.

A load reports every error at once (``rft_core.config.problems``): each unknown key, wrong type
and bad choice, each value out of range, and the first cross-field rule broken (when the values
were all read: one bad value's default standing in could break a rule the user did not).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rft_core.config.fields import default_value, iter_fields, strip_optional
from rft_core.config.problems import collecting, raise_found, report
from rft_core.config.schema import Config
from rft_core.config.validate import validate
from rft_core.errors import ConfigError
from rft_core.registry import closest_name

# Keys that older Trinity versions accepted and that moved: the error says where they went. An
# entry "section.key" matches that path only (list indices dropped); a bare "key" matches anywhere.
MOVED_KEYS = {
    "sft_warmup_dataset": "SFT warmup is a stage now: add `stages: [{stage_name: sft_warmup, mode: train, algorithm: {algorithm_type: sft}, buffer: {...}}, {stage_name: rft}]` (see examples/grpo_gsm8k/gsm8k_sft_warmup.yaml)",
    "sft_warmup_steps": "SFT warmup is a stage now: set buffer.total_steps inside an sft_warmup stage (see examples/grpo_gsm8k/gsm8k_sft_warmup.yaml)",
    "algorithm_type": "moved to algorithm.algorithm_type",
    "synchronizer.sync_iteration_interval": "renamed to synchronizer.sync_interval",
    "data_processor.data_processor_url": "it is the URL of an outside data-processor service "
    "(Trinity-RFT <= 0.2 ran its task/experience pipelines there), which RFT Studio does not "
    "call: remove it (the data_processor pipelines are accepted with a warning, no effect)",
    "data": "Trinity-RFT's old `data` section is gone: tasksets live in buffer.explorer_input.taskset (name, path, format, ...) and buffer.batch_size / total_epochs in buffer",
}


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """Load a YAML config file, apply ``key=value`` overrides, resolve and validate it."""
    path = Path(path)
    if path.is_dir():
        found = sorted(p.name for p in path.glob("*.yaml"))
        shown = ", ".join(found[:12]) + (f" (+{len(found) - 12} more)" if len(found) > 12 else "")
        raise ConfigError(
            "",
            f"{str(path)!r} is a directory; give the path of a YAML file"
            + (f" in it: {shown}" if found else ""),
        )
    if not path.is_file():
        raise ConfigError(
            "", f"config file {str(path)!r} does not exist (give the path of a YAML file)"
        )
    try:
        raw = OmegaConf.load(path)
    except (yaml.YAMLError, OmegaConfBaseException) as err:
        first = " ".join(str(err).split())
        raise ConfigError("", f"{path} is not valid YAML: {first}") from err
    if raw is None or isinstance(raw, ListConfig):
        raise ConfigError("", f"{path} must hold a mapping of sections (mode, model, buffer, ...)")
    return _load(raw, overrides)


def load_config_from_dict(d: Mapping[str, Any], overrides: Sequence[str] = ()) -> Config:
    """Same as :func:`load_config` for a dict (the web forms post one)."""
    if not isinstance(d, Mapping):
        raise ConfigError("", f"a config must be a mapping of sections, got {type(d).__name__}")
    try:
        raw = OmegaConf.create(dict(d))
    except OmegaConfBaseException as err:
        raise ConfigError("", f"cannot read the config: {' '.join(str(err).split())}") from err
    return _load(raw, overrides)


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """The config (or one section) as plain dicts and lists, resolved."""
    return dataclasses.asdict(cfg)


def config_to_yaml(cfg: Config) -> str:
    """The resolved config as YAML (``trinity run --dry-run`` prints it); loading it gives ``cfg`` back."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False, allow_unicode=True, width=100)


def _load(raw: DictConfig, overrides: Sequence[str]) -> Config:
    _apply_overrides(raw, overrides)
    unresolved = OmegaConf.to_container(raw, resolve=False)
    filled = OmegaConf.create(_with_defaults(Config, unresolved))
    data = _resolve(filled, "")
    with collecting() as found:
        cfg = build(Config, data, "")  # every bad key and value, each field's default in its place
        built_cleanly = not found
        with collecting() as rules:
            try:
                validate(cfg)  # every rule reports and goes on, but for the few that must stop
            except ConfigError as err:
                err.cross_field = True
                rules.append(err)
        for err in rules:
            # a cross-field rule may have tripped on a default standing in for a bad value
            if built_cleanly or not err.cross_field:
                report(err)
    raise_found(found, partial_config=cfg)
    return cfg


def _apply_overrides(raw: DictConfig, overrides: Sequence[str]) -> None:
    for item in overrides:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                item, "an override must look like section.key=value, e.g. buffer.batch_size=8"
            )
        try:
            raw.merge_with_dotlist([item])
        except yaml.YAMLError as err:
            value = item.partition("=")[2]
            problem = getattr(err, "problem", None) or " ".join(str(err).split())
            raise ConfigError(
                key.strip(),
                f"cannot apply override {item!r}: the value {value!r} is not valid YAML "
                f"({problem}); a text value holding {{ [ : or # goes in quotes, "
                f"e.g. {key.strip()}='\"{value}\"'",
            ) from err
        except (OmegaConfBaseException, TypeError, ValueError) as err:
            msg = " ".join(str(err).split())
            raise ConfigError(key.strip(), f"cannot apply override {item!r}: {msg}") from err


# ---------------------------------------------------------------- defaults and interpolation


def _with_defaults(cls: type, user: Any) -> Any:
    """The user's values with the schema's defaults filled in wherever a section is a mapping, so
    that ``${section.key}`` can point at a value the user did not write."""
    if not isinstance(user, dict):
        return user
    out: dict[str, Any] = {}
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in user:
            out[f.name] = default_value(f)
    for key, value in user.items():
        tp = hints.get(key) if isinstance(key, str) else None
        out[key] = _with_defaults_typed(tp, value) if tp is not None else value
    return out


def _with_defaults_typed(tp: Any, value: Any) -> Any:
    tp, _ = strip_optional(tp)
    if dataclasses.is_dataclass(tp):
        return _with_defaults(tp, value)
    if typing.get_origin(tp) is list and isinstance(value, list):
        (item_tp,) = typing.get_args(tp)
        return [_with_defaults_typed(item_tp, v) for v in value]
    return value


_ENV_MISSING = re.compile(r"Environment variable '([^']+)' not found")
_KEY_MISSING = re.compile(r"Interpolation key '([^']+)' not found")


def _resolve(node: Any, path: str) -> Any:
    """Plain containers with every interpolation resolved; an error names the key that failed."""
    if isinstance(node, DictConfig):
        out = {}
        for key in node.keys():
            sub = _join(path, str(key))
            out[key] = _resolve(_get(node, key, sub), sub)
        return out
    if isinstance(node, ListConfig):
        return [_resolve(_get(node, i, f"{path}[{i}]"), f"{path}[{i}]") for i in range(len(node))]
    return node


def _get(node: DictConfig | ListConfig, key: Any, path: str) -> Any:
    try:
        value = node[key]
    except OmegaConfBaseException as err:
        raw = node._get_node(key)._value() if node._get_node(key) is not None else None
        text = " ".join(str(err).split())
        env = _ENV_MISSING.search(text)
        if env:
            var = env.group(1)
            msg = (
                f"environment variable {var} is not set (in {raw!r}); export {var}=... "
                f"or give a default: ${{oc.env:{var},<default>}}"
            )
        elif m := _KEY_MISSING.search(text):
            msg = f"cannot resolve {raw!r}: there is no key {m.group(1)!r} in the config"
        else:
            msg = f"cannot resolve {raw!r}: {text.split(' full_key:')[0]}"
        raise ConfigError(path, msg, value=raw) from err
    child = node._get_node(key)
    if value is None and child is not None and child._is_interpolation():
        raw = child._value()
        target = _PLAIN_REFERENCE.fullmatch(str(raw).strip())
        if target and target.group(1) in _derived_paths():
            # the validator fills that key after loading: too late for this reference
            raise ConfigError(
                path,
                f"{raw!r} is null when the config is read ({target.group(1)} is derived by the "
                "validator after loading); write the value here",
                value=raw,
            )
    return value


_PLAIN_REFERENCE = re.compile(r"\$\{([A-Za-z_][\w.]*)\}")


@cache
def _derived_paths() -> frozenset[str]:
    """YAML paths of the fields the validator derives when left null (no list items)."""
    return frozenset(f.path for f in iter_fields() if f.derived and "[]" not in f.path)


# ---------------------------------------------------------------- typed building


def build(cls: type, data: Any, path: str) -> Any:
    """Turn a plain mapping into the dataclass ``cls``; unknown keys, wrong types and bad choices
    raise ConfigError naming the full YAML path. While a load collects errors
    (``rft_core.config.problems``) each bad key is reported and the field keeps its default."""
    if data is None:
        return cls()
    if not isinstance(data, Mapping):
        raise ConfigError(
            path,
            f"must be a mapping of {_section_name(cls)} fields, got {_show(data)}",
            value=data,
            allowed=[f.name for f in dataclasses.fields(cls)],
        )
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = _hints(cls)
    kwargs = {}
    for key, value in data.items():
        sub = _join(path, str(key))
        try:
            if key not in fields:
                raise _unknown_key(sub, str(key), list(fields))
            kwargs[key] = convert(hints[key], value, sub, fields[key].metadata)
        except ConfigError as err:
            report(err)
    return cls(**kwargs)


def convert(tp: Any, value: Any, path: str, meta: Mapping[str, Any] | None = None) -> Any:
    """Convert one value to the annotated type ``tp`` (see :func:`build`)."""
    meta = meta or {}
    tp, optional = strip_optional(tp)
    if optional and value == "" and tp is not str:
        value = None  # a form's empty number field
    if value is None:
        if optional or tp is Any:
            return None
        if typing.get_origin(tp) is dict:
            return {}  # Trinity's free-form dicts are Optional[dict]: `kl_loss_fn_args: null`
        if dataclasses.is_dataclass(tp):
            return tp()  # `format:` with nothing under it: the section's defaults
        choices = meta.get("choices")
        wanted = f"one of {', '.join(choices)}" if choices else _type_name(tp)
        raise ConfigError(path, f"must be {wanted}, got null", value=None, allowed=choices)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    origin = typing.get_origin(tp)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(path, f"must be a list, got {_show(value)}", value=value)
        (item_tp,) = typing.get_args(tp)
        return [convert(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(
                path, f"must be a mapping (free-form keys), got {_show(value)}", value=value
            )
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        return _to_bool(value, path)
    if tp is int:
        return _to_int(value, path)
    if tp is float:
        return _to_float(value, path)
    if tp is str:
        choices = meta.get("choices")
        if choices and not isinstance(value, str):  # `save_hf_checkpoint: true`, `mode: [both]`
            raise ConfigError(
                path,
                f"must be one of {', '.join(choices)}, got {_show(value)}",
                value=value,
                allowed=list(choices),
            )
        return _to_choice(_to_str(value, path), path, meta)
    raise TypeError(
        f"schema type {tp!r} at {path} is not supported"
    )  # a schema bug, not a user error


def _to_bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in {
        "true",
        "false",
        "yes",
        "no",
        "on",
        "off",
    }:
        return value.strip().lower() in {"true", "yes", "on"}
    raise ConfigError(
        path, f"must be true or false, got {_show(value)}", value=value, allowed=[True, False]
    )


def _to_int(value: Any, path: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(path, f"must be an integer, got {_show(value)}", value=value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ConfigError(path, f"must be an integer, got {_show(value)}", value=value)


def _to_float(value: Any, path: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ConfigError(path, f"must be a number, got {_show(value)}", value=value)


def _to_str(value: Any, path: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # `subset_name: 2021`, `name: 7`
    raise ConfigError(path, f"must be a string, got {_show(value)}", value=value)


def _to_choice(value: str, path: str, meta: Mapping[str, Any]) -> str:
    choices = meta.get("choices")
    if not choices:
        return value
    key = value.strip().lower()
    aliases = {k.lower(): v for k, v in (meta.get("aliases") or {}).items()}
    key = aliases.get(key, key)
    if key in choices:
        return key
    refused = meta.get("refused") or {}
    if key in refused:
        msg = f"{value!r} {refused[key]}; implemented: {', '.join(choices)}"
        raise ConfigError(path, msg, value=value, allowed=list(choices))
    hint = _closest(key, list(choices) + list(aliases))
    msg = f"{value!r} is not one of {', '.join(choices)}"
    if aliases:
        msg += f" (aliases: {', '.join(f'{a}={b}' for a, b in aliases.items())})"
    if hint:
        msg += f"; did you mean {hint!r}?"
    raise ConfigError(path, msg, value=value, allowed=list(choices))


def _unknown_key(path: str, key: str, allowed: list[str]) -> ConfigError:
    moved = MOVED_KEYS.get(re.sub(r"\[\d+\]", "", path).removeprefix("stages.")) or MOVED_KEYS.get(
        key
    )
    if moved:
        return ConfigError(path, f"unknown key {key!r}: {moved}", value=key, allowed=allowed)
    hint = _closest(key, allowed)
    msg = f"unknown key {key!r}"
    if hint:
        msg += f" (did you mean {hint!r}?)"
    msg += f"; allowed keys here: {', '.join(allowed)}"
    return ConfigError(path, msg, value=key, allowed=allowed)


def _closest(word: str, candidates: list[str]) -> str | None:
    return closest_name(word, candidates, cutoff=0.6)


# ---------------------------------------------------------------- typing helpers


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_name(tp: Any) -> str:
    if dataclasses.is_dataclass(tp):
        return f"a mapping of {_section_name(tp)} fields"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        tp, "a list" if typing.get_origin(tp) is list else "a mapping"
    )


def _section_name(cls: type) -> str:
    return cls.__name__.removesuffix("Config") or cls.__name__


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    kind = {dict: "mapping", list: "list"}.get(type(value), type(value).__name__)
    return f"{text} ({kind})"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
