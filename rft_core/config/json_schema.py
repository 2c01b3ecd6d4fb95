"""JSON schema of the config (draft 2020-12) for the web forms: per property ``title``,
``description`` (the help text), ``default``, ``enum`` (choices), ``x-section``, ``x-level``
(beginner | expert), ``x-aliases``, ``x-derived`` (unset means the validator decides) with
``x-derived-from`` (the YAML paths it is filled from), ``x-show-when`` (the values of other
fields under which a form shows it), ``x-deprecated`` (an older spelling: the key to write
instead) and ``x-unimplemented`` (accepted for Trinity-RFT compatibility, not acted on). Forms
decide from these keys only, never from the description."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from rft_core.config.fields import FieldInfo, inner_cap, iter_fields
from rft_core.config.schema import Config

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def json_schema() -> dict[str, Any]:
    """The whole config tree as a JSON schema."""
    schema = _object_schema(Config, "", "")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "RFT Studio / Trinity-RFT config"
    return schema


def _object_schema(
    cls: type, prefix: str, section: str, cap: frozenset[str] | None = None
) -> dict[str, Any]:
    props = {}
    for info in iter_fields(cls, prefix, section, recursive=False, cap=cap):
        props[info.name] = _property(info, inner_cap(info, cap))
    return {"type": "object", "additionalProperties": False, "properties": props}


def _property(info: FieldInfo, cap: frozenset[str] | None) -> dict[str, Any]:
    prop: dict[str, Any]
    if dataclasses.is_dataclass(info.type):
        prop = _object_schema(info.type, info.path, info.section, cap)
    elif info.item_type is not None:
        prop = {
            "type": "array",
            "items": _object_schema(info.item_type, f"{info.path}[]", info.section, cap),
        }
    elif typing.get_origin(info.type) is list:
        (item,) = typing.get_args(info.type)
        prop = {"type": "array", "items": {"type": _JSON_TYPES[item]}}
    elif typing.get_origin(info.type) is dict or info.type is Any:
        prop = {"type": "object", "additionalProperties": True}
    else:
        prop = {"type": _JSON_TYPES[info.type]}
    if info.optional:
        prop["type"] = [prop["type"], "null"]
    prop["title"] = info.name.replace("_", " ").capitalize()
    prop["description"] = info.help
    if not dataclasses.is_dataclass(info.type) or info.default is not None:
        prop["default"] = info.default
    if info.choices:
        prop["enum"] = list(info.choices) + ([None] if info.optional else [])
    if info.aliases:
        prop["x-aliases"] = dict(info.aliases)
    prop["x-section"] = info.section
    prop["x-level"] = info.level
    prop["x-path"] = info.path
    if info.derived:
        prop["x-derived"] = True
        prop["x-derived-from"] = list(info.derived_from or [])
    if info.show_when:
        prop["x-show-when"] = {k: list(v) for k, v in info.show_when.items()}
    if info.deprecated:
        prop["x-deprecated"] = info.deprecated
    if info.unimplemented:
        prop["x-unimplemented"] = True  # the forms leave it out: it would have no effect
    return prop
