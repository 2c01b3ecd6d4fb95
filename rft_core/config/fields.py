"""Walking the schema: every field with its YAML path, type, default and metadata. The JSON schema,
the reference YAML and the web forms read the schema through this one walker."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rft_core.config.meta import EXPERT
from rft_core.config.schema import BEGINNER, Config


@dataclass
class FieldInfo:
    path: str  # dotted YAML path; list items as [] (buffer.explorer_input.eval_tasksets[].name)
    name: str
    type: Any  # the annotation with Optional stripped
    optional: bool
    default: Any  # plain value (dataclass defaults as dicts); None when derived
    help: str
    choices: list[str] | None
    aliases: dict[str, str]
    level: str
    section: str  # top-level section (algorithm, model, ...) or "general"
    unimplemented: bool = False  # accepted for Trinity-RFT compatibility, not acted on
    # YAML paths the validator fills it from (None: not derived); meta.py has these keys' rules
    derived_from: list[str] | None = None
    show_when: dict[str, list[Any]] | None = None  # YAML path -> values that show it in forms
    deprecated: str | None = None  # the key to write instead
    beginner_keys: list[str] | None = None  # of a section: the only keys in it a beginner sees

    @property
    def is_section(self) -> bool:
        return dataclasses.is_dataclass(self.type) or self.item_type is not None

    @property
    def item_type(self) -> type | None:
        """The dataclass of list items (tasksets, eval_tasksets, stages), else None."""
        if typing.get_origin(self.type) is list:
            (item,) = typing.get_args(self.type)
            return item if dataclasses.is_dataclass(item) else None
        return None

    @property
    def derived(self) -> bool:
        return self.derived_from is not None


def iter_fields(
    cls: type = Config,
    prefix: str = "",
    section: str = "",
    *,
    recursive: bool = True,
    cap: frozenset[str] | None = None,
) -> Iterator[FieldInfo]:
    """Every field of ``cls`` in declaration order, recursing into sections (depth first).
    ``cap``: the only paths that may be beginner fields (None: any), set by :func:`inner_cap`."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, optional = strip_optional(hints[f.name])
        path = f"{prefix}.{f.name}" if prefix else f.name
        meta = f.metadata
        info = FieldInfo(
            path=path,
            name=f.name,
            type=tp,
            optional=optional,
            default=default_value(f),
            help=f.metadata.get("help", ""),
            choices=f.metadata.get("choices"),
            aliases=f.metadata.get("aliases", {}),
            level=meta.get("level", BEGINNER) if cap is None or path in cap else EXPERT,
            section=section
            or (f.name if dataclasses.is_dataclass(tp) or f.name == "stages" else "general"),
            unimplemented=meta.get("unimplemented", False),
            derived_from=_paths(meta.get("derived_from"), prefix),
            show_when=(
                {_path(k, prefix): list(v) for k, v in meta["show_when"].items()}
                if "show_when" in meta
                else None
            ),
            deprecated=meta.get("deprecated"),
            beginner_keys=meta.get("beginner_keys"),
        )
        yield info
        if not recursive:
            continue
        inner = inner_cap(info, cap)
        if dataclasses.is_dataclass(tp):
            yield from iter_fields(tp, path, info.section, cap=inner)
        elif info.item_type is not None:
            yield from iter_fields(info.item_type, f"{path}[]", info.section, cap=inner)


def inner_cap(info: FieldInfo, cap: frozenset[str] | None) -> frozenset[str] | None:
    """The ``cap`` of the fields inside section ``info``: its ``beginner_keys`` when it lists
    them; none at all when it is an expert section a beginner may leave out (optional, or a
    list of items); else the one it has."""
    inside = f"{info.path}[]" if info.item_type is not None else info.path
    if info.level == EXPERT and (info.optional or info.item_type is not None):
        return frozenset()
    if info.beginner_keys is not None:
        return frozenset(f"{inside}.{key}" for key in info.beginner_keys)
    return cap


def _path(path: str, prefix: str) -> str:
    """A metadata path as a YAML path: ``.key`` is within the field's own section."""
    return f"{prefix}{path}" if path.startswith(".") and prefix else path.lstrip(".")


def _paths(paths: list[str] | None, prefix: str) -> list[str] | None:
    return None if paths is None else [_path(p, prefix) for p in paths]


def default_value(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return f.default


def strip_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False
