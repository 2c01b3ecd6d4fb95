"""Config paths and field texts for the experiment form: a form field's name is its YAML path
with list indices (``buffer.explorer_input.eval_tasksets[0].name``); here is how such a name reads
and writes a config mapping (``get_path``/``set_path``/``del_path``), which field an error path lands
beside (``field_for_path``), and how a value is shown as a field's text and parsed back
(``value_text``/``parse_text``; numbers as text, so ``${oc.env:...}`` fits anywhere)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from webapp.errors import ActionError
from webapp.experiments.config_policy import parse_yaml

_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def split_path(name: str) -> list[str | int]:
    return [int(i) if i else k for k, i in _TOKEN.findall(name)]


MISSING = object()


def get_path(data: Any, tokens: list[str | int]) -> Any:
    node = data
    for token in tokens:
        if isinstance(token, int):
            if not isinstance(node, list) or token >= len(node):
                return MISSING
            node = node[token]
        else:
            if not isinstance(node, Mapping) or token not in node:
                return MISSING
            node = node[token]
    return node


def set_path(data: dict, tokens: list[str | int], value: Any) -> None:
    node: Any = data
    for i, token in enumerate(tokens[:-1]):
        nxt = node[token] if isinstance(token, int) else node.get(token)
        if not isinstance(nxt, (dict, list)):
            nxt = [] if isinstance(tokens[i + 1], int) else {}
            node[token] = nxt
        node = nxt
    node[tokens[-1]] = value


def del_path(data: dict, tokens: list[str | int]) -> None:
    parent = get_path(data, tokens[:-1]) if len(tokens) > 1 else data
    if isinstance(parent, dict):
        parent.pop(tokens[-1], None)


def field_for_path(path: str, names: list[str] | set[str]) -> str | None:
    """The form field an error at YAML ``path`` belongs beside: itself or its closest ancestor."""
    candidate = path
    while candidate:
        if candidate in names:
            return candidate
        cut = max(candidate.rfind("."), candidate.rfind("["))
        candidate = candidate[:cut] if cut > 0 else ""
    return None


# ---------------------------------------------------------------- value <-> text


def value_text(value: Any, kind: str) -> str:
    if value is MISSING or value is None:
        return ""
    if kind == "yaml" or isinstance(value, (dict, list)):
        flow = isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value)
        text = yaml.safe_dump(value, default_flow_style=flow or None, sort_keys=False, width=100)
        return text.strip().removesuffix("...").strip()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value).strip().removesuffix("...").strip()


def parse_text(text: str, kind: str, original: Any, name: str) -> Any:
    """The value a posted text means for a field of ``kind`` (the original decides raw vs YAML)."""
    raw_string = kind in ("string", "select") and (
        original in (None, MISSING) or isinstance(original, str)
    )
    if raw_string:
        return text
    try:
        return parse_yaml(text, what=f"{name}")
    except ActionError as err:
        raise ActionError(err.message, errors={name: err.message}) from err


def norm_text(text: str) -> str:
    return text.replace("\r\n", "\n").strip()


def without_fields(value: Any, prefix: str, names: set[str]) -> Any:
    """``value`` (the mapping at ``prefix``) without the keys that have a field in ``names``;
    ``MISSING`` when nothing is left."""
    if not isinstance(value, Mapping):
        return MISSING
    out: dict[str, Any] = {}
    for key, item in value.items():
        path = f"{prefix}.{key}"
        if path in names:
            continue
        if isinstance(item, Mapping) and any(n.startswith(f"{path}.") for n in names):
            inner = without_fields(item, path, names)
            if inner is not MISSING:
                out[key] = inner
            continue
        out[key] = item
    return out or MISSING
