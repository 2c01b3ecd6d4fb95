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
from webapp.experiments.form_model import ExperimentForm, Field, list_blocks, template_fields
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
    patterns = _template_specs(form)
    covered = set(patterns) | {_pattern(b.name) for b in list_blocks(form, templates=True)}
    result: dict[str, Any] = copy.deepcopy(dict(original))
    origins: dict[str, dict[int, str]] = {}  # posted list name -> posted index -> origin
    errors: dict[str, str] = {}
    for block_name in _posted_lists(form, post):  # outer lists first: inner ones land in them
        original_name, result_name, known = _translate(block_name, origins)
        if not known or not _in_an_item(result, result_name):
            continue  # inside an item that was not posted, or one past the original's end
        items = _list_items(post, block_name)
        was = get_path(original, split_path(original_name)) if original_name else MISSING
        before = was if isinstance(was, list) else []
        new_list = []
        origins[block_name] = {}
        for index, origin in items:
            ok = origin.isdigit() and int(origin) < len(before)
            new_list.append(copy.deepcopy(before[int(origin)]) if ok else {})
            origins[block_name][index] = origin if ok else NEW
        if [origin for _, origin in items] == [str(i) for i in range(len(before))]:
            continue  # the list as it was: left as written (an empty list too)
        if new_list:
            set_path(result, split_path(result_name), new_list)
        elif was is not MISSING:
            del_path(result, split_path(result_name))
    # field names as posted -> where the value was in the original and is in the result
    escapes = []
    for name, posted in post.items():
        if name.endswith((ORIGIN, RENDERED)) or not _is_config_field(name):
            continue
        spec, original_name, result_name = _locate(specs, patterns, name, origins)
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
                covered, result, original, name, posted, original_name, result_name, trust_unchanged
            )
        except ActionError as err:
            errors.update(err.errors)
    if errors:
        path, msg = next(iter(errors.items()))
        raise ActionError(f"{path}: {msg}", errors=errors)
    return result


def _merge_escape(covered: set[str], result: dict[str, Any], original: Mapping[str, Any], name: str, posted: str, original_name: str | None, result_name: str, trust_unchanged: bool) -> None:  # fmt: skip
    """A stage section's YAML box (``stages[0].buffer``): the keys it showed are replaced by the
    keys it holds now, merged into the section the fields left (module docstring)."""
    m = _ITEM.match(result_name)
    rest = m.group("rest") if m else result_name
    before = MISSING
    if original_name is not None:
        before = without_fields(
            get_path(original, split_path(original_name)),
            original_name,
            _covered_under(covered, original_name),
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


def _covered_under(covered: set[str], section: str) -> set[str]:
    """The names of the fields and lists (``covered``, without indices) under list item section
    ``section`` (``stages[1].buffer``), with its indices: ``stages[1].buffer.total_steps``."""
    head = _pattern(section)
    return {section + n[len(head) :] for n in covered if n.startswith(f"{head}.")}


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
_INDEX = re.compile(r"\[(\d+|__i__|__j__)\]")


def _pattern(name: str) -> str:
    """``name`` with its list indices left out: ``stages[].buffer.explorer_input.eval_tasksets[].path``."""
    return _INDEX.sub("[]", name)


def _posted_lists(form: ExperimentForm, post: Mapping[str, str]) -> list[str]:
    """The lists the post rendered (its ``<list>.__rendered__`` markers), outer before inner; only
    lists the form has."""
    known = {_pattern(b.name) for b in list_blocks(form, templates=True)}
    suffix = f".{RENDERED}"
    names = [k[: -len(suffix)] for k in post if k.endswith(suffix)]
    return sorted((n for n in names if _pattern(n) in known), key=lambda n: (n.count("["), n))


def _translate(name: str, origins: dict[str, dict[int, str]]) -> tuple[str | None, str, bool]:
    """Posted ``name`` as (its name in the original, None inside a new item; its name in the
    result; whether each of its list items was posted). Each index of a posted list maps to the
    item's origin in the original and to its position in the result."""
    original: str | None = ""
    result, last = "", 0
    for m in re.finditer(r"\[(\d+)\]", name):
        segment, index = name[last : m.start()], int(m.group(1))
        posted_list = name[: m.start()]
        result += segment
        original = None if original is None else original + segment
        if posted_list in origins:
            origin = origins[posted_list].get(index)
            if origin is None:
                return None, name, False
            result += f"[{sorted(origins[posted_list]).index(index)}]"
            original = None if original is None or origin == NEW else f"{original}[{origin}]"
        else:  # a post without the list's markers: the index as it is
            result += f"[{index}]"
            original = None if original is None else f"{original}[{index}]"
        last = m.end()
    tail = name[last:]
    return (None if original is None else original + tail), result + tail, True


def _in_an_item(result: Mapping[str, Any], name: str) -> bool:
    """Whether the list item that holds the list ``name`` is in ``result`` (a top-level list is)."""
    tokens = split_path(name)
    last = max((i for i, t in enumerate(tokens) if isinstance(t, int)), default=None)
    return last is None or isinstance(get_path(result, tokens[: last + 1]), Mapping)


def _locate(specs: dict[str, Field], patterns: dict[str, Field], name: str, origins: dict[str, dict[int, str]]) -> tuple[Field | None, str | None, str]:  # fmt: skip
    """The field spec of posted ``name``, its name in the original (None: a new item) and in the result."""
    original_name, result_name, known = _translate(name, origins)
    if not known:
        return None, None, name
    lists = [name[: m.start()] for m in re.finditer(r"\[(\d+)\]", name)]
    if all(n in origins for n in lists):  # every list posted: any index, new items too
        return patterns.get(_pattern(name)), original_name, result_name
    if original_name != name or result_name != name:
        return None, None, name  # an item moved whose inner list the post left unmarked
    return specs.get(name), name, name


def _field_specs(form: ExperimentForm) -> dict[str, Field]:
    return {f.name: f for f in form.fields()}


def _template_specs(form: ExperimentForm) -> dict[str, Field]:
    """Every field of ``form`` and of the items its JS clones, by name without list indices."""
    return {_pattern(f.name): f for f in [*form.fields(), *template_fields(form)]}


def _merge_into(target: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """``extra`` merged into ``target`` key by key (mappings recursively)."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
