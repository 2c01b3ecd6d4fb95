"""The merge of a posted experiment form back onto the config mapping it was rendered from
(``merge_form``), and what a browser posts for a form left as rendered (``initial_post``).

The result starts as the original mapping; a field whose posted text equals the text it was
rendered with is unchanged (its original value, ``${oc.env:...}`` included, stays as written); a
changed field sets its parsed value, an emptied one removes the key; a field left empty that the
original did not have adds nothing. Each list item posts ``<list>[i].__origin__``, the index it
had in the original mapping (or ``new``); a stage section's YAML box merges into the section key
by key, after the fields.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from webapp.errors import ActionError
from webapp.experiments.form_build import build_form
from webapp.experiments.form_model import ExperimentForm, Field, group_fields, list_blocks
from webapp.experiments.form_values import (
    MISSING,
    del_path,
    get_path,
    norm_text,
    parse_text,
    set_path,
    split_path,
    value_text,
    without_fields,
)

ORIGIN = "__origin__"
RENDERED = "__rendered__"
NEW = "new"
PAGE_FIELDS = {
    "csrfmiddlewaretoken",
    "base_yaml",
    "config_yaml",
    "config_file",
    "source",
    "note",
    "to",
}


def initial_post(form: ExperimentForm) -> dict[str, str]:
    """What a browser posts for ``form`` left as rendered (the list markers included)."""
    post = {f.name: f.text for f in form.fields()}
    for block in list_blocks(form):
        post[f"{block.name}.{RENDERED}"] = "1"
        for item in block.items:
            post[f"{block.name}[{item.index}].{ORIGIN}"] = item.origin
    return post


def _list_items(post: Mapping[str, str], name: str) -> list[tuple[int, str]]:
    pattern = re.compile(rf"^{re.escape(name)}\[(\d+)\]\.{ORIGIN}$")
    found = [(int(m.group(1)), post[k]) for k in post if (m := pattern.match(k))]
    return sorted(found)


def merge_form(original: Mapping[str, Any], post: Mapping[str, str], *, trust_unchanged: bool = True) -> dict[str, Any]:  # fmt: skip
    """``post`` (field name -> text) merged onto ``original`` (see the module doc).
    ``trust_unchanged=False`` parses every posted text (tests use it to prove the encoding)."""
    form = build_form(original)
    specs = _field_specs(form)
    result: dict[str, Any] = copy.deepcopy(dict(original))
    origins: dict[str, dict[int, str]] = {}
    errors: dict[str, str] = {}
    for block in list_blocks(form):
        if f"{block.name}.{RENDERED}" not in post:
            continue
        items = _list_items(post, block.name)
        before = get_path(original, split_path(block.name))
        before = before if isinstance(before, list) else []
        new_list = []
        origins[block.name] = {}
        for index, origin in items:
            ok = origin.isdigit() and int(origin) < len(before)
            new_list.append(copy.deepcopy(before[int(origin)]) if ok else {})
            origins[block.name][index] = origin if ok else NEW
        if [origin for _, origin in items] == [str(i) for i in range(len(before))]:
            continue  # the list as it was: left as written (an empty list too)
        if new_list or get_path(original, split_path(block.name)) is not MISSING:
            if new_list:
                set_path(result, split_path(block.name), new_list)
            else:
                del_path(result, split_path(block.name))
    # field names as posted -> where the value was in the original and is in the result
    escapes = []
    for name, posted in post.items():
        if name.endswith((ORIGIN, RENDERED)) or not _is_config_field(name):
            continue
        spec, original_name, result_name = _locate(form, specs, name, origins)
        if spec is None:
            continue
        if spec.escape:  # after the fields, whose keys it leaves alone
            escapes.append((name, posted, original_name, result_name))
            continue
        before = get_path(original, split_path(original_name)) if original_name else MISSING
        initial = value_text(before, spec.kind)
        if trust_unchanged and norm_text(posted) == norm_text(initial):
            continue
        tokens = split_path(result_name)
        if not norm_text(posted):
            if spec.kind == "string" and before == "":
                continue  # an empty string as written (response_key: ""): its only rendering
            if before is not MISSING or not trust_unchanged:
                del_path(result, tokens)
            continue
        if before is MISSING and norm_text(posted) == norm_text(spec.default_text):
            continue  # left at the default, not in the original: not added
        try:
            set_path(
                result,
                tokens,
                parse_text(
                    norm_text(posted) if spec.kind != "string" else posted.replace("\r\n", "\n"),
                    spec.kind,
                    before,
                    name,
                ),
            )
        except ActionError as err:
            errors.update(err.errors)
    for name, posted, original_name, result_name in escapes:
        try:
            _merge_escape(
                form, result, original, name, posted, original_name, result_name, trust_unchanged
            )
        except ActionError as err:
            errors.update(err.errors)
    if errors:
        path, msg = next(iter(errors.items()))
        raise ActionError(f"{path}: {msg}", errors=errors)
    return result


def _merge_escape(form: ExperimentForm, result: dict[str, Any], original: Mapping[str, Any], name: str, posted: str, original_name: str | None, result_name: str, trust_unchanged: bool) -> None:  # fmt: skip
    """A stage section's YAML box (``stages[0].buffer``): the keys it showed are replaced by the
    keys it holds now, merged into the section the fields left (module docstring)."""
    m = _ITEM.match(result_name)
    block, rest = (m.group("list"), m.group("rest")) if m else ("stages", result_name)
    relative = _section_field_names(form, block, rest)
    before = MISSING
    if original_name is not None:
        head = original_name[: -len(rest)]
        before = without_fields(
            get_path(original, split_path(original_name)),
            original_name,
            {head + n for n in relative},
        )
    if trust_unchanged and norm_text(posted) == norm_text(value_text(before, "yaml")):
        return
    extra = parse_text(norm_text(posted), "yaml", None, name) if norm_text(posted) else None
    if extra is not None and not isinstance(extra, Mapping):
        message = f"must be a mapping of {rest} keys, got {type(extra).__name__}"
        raise ActionError(f"{name}: {message}", errors={name: message})
    tokens = split_path(result_name)
    section = get_path(result, tokens)
    section = copy.deepcopy(section) if isinstance(section, dict) else {}
    if isinstance(before, Mapping):
        _drop_keys(section, before)
    _merge_into(section, extra or {})
    if section:
        set_path(result, tokens, section)
    else:
        del_path(result, tokens)


def _section_field_names(form: ExperimentForm, block_name: str, rest: str) -> set[str]:
    """Names (from ``rest``, e.g. ``buffer.total_steps``) of the fields of a list item's section."""
    head = f"{block_name}[__i__]."
    for block in list_blocks(form):
        if block.name == block_name:
            names = (f.name[len(head) :] for f in group_fields(block.template))
            return {n for n in names if n.startswith(f"{rest}.")}
    return set()


def _drop_keys(target: dict[str, Any], keys: Mapping[str, Any]) -> None:
    """``target`` without the keys of ``keys`` (nested mappings: their keys only)."""
    for key, value in keys.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _drop_keys(target[key], value)
            if not target[key]:
                del target[key]
        else:
            target.pop(key, None)


def _is_config_field(name: str) -> bool:
    """Posted names that are not config fields: the experiment's own fields and the page's."""
    return not name.startswith("experiment.") and name not in PAGE_FIELDS


_ITEM = re.compile(r"^(?P<list>.+?)\[(?P<i>\d+)\]\.(?P<rest>.+)$")


def _locate(form: ExperimentForm, specs: dict[str, Field], name: str, origins: dict[str, dict[int, str]]) -> tuple[Field | None, str | None, str]:  # fmt: skip
    """The field spec of posted ``name``, its name in the original (None: a new item) and in the result."""
    m = _ITEM.match(name)
    if m and m.group("list") in origins:
        block, index, rest = m.group("list"), int(m.group("i")), m.group("rest")
        origin = origins[block].get(index)
        if origin is None:
            return None, None, name
        spec = _template_field(form, block, rest)
        result_name = f"{block}[{sorted(origins[block]).index(index)}].{rest}"
        return spec, (f"{block}[{origin}].{rest}" if origin != NEW else None), result_name
    return specs.get(name), name, name


def _field_specs(form: ExperimentForm) -> dict[str, Field]:
    return {f.name: f for f in form.fields()}


def _template_field(form: ExperimentForm, block_name: str, rest: str) -> Field | None:
    for block in list_blocks(form):
        if block.name == block_name:
            for f in group_fields(block.template):
                if f.name == f"{block_name}[__i__].{rest}":
                    return f
    return None


def _merge_into(target: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """``extra`` merged into ``target`` key by key (mappings recursively)."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
