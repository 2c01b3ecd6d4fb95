"""The experiment form, generated from ``rft_core.config.json_schema()`` section by section, and
the merge of a posted form back onto the config mapping it was rendered from.

A field's name is its YAML path with list indices (``buffer.explorer_input.eval_tasksets[0].name``),
so a ``ConfigError`` path lands beside its field (``field_for_path``). Every field is a text-like
control holding the value as text (numbers as text, so ``${oc.env:...}`` fits anywhere):

- scalars: ``string`` (raw text), ``number``/``integer`` (parsed as a YAML scalar), ``select``
  (choices; an unknown value the YAML holds is kept as an extra option), ``bool`` (true/false);
- ``yaml``: free-form mappings (``*_args``, ``trainer_config``, ...) and scalar lists (betas);
- the arguments of the chosen advantage fn and policy loss as real fields
  (``algorithm.advantage_fn_args.epsilon``), from the committed table of registered names;
- lists of sections (tasksets, eval tasksets, stages) with add/remove/reorder: each item posts
  ``<list>[i].__origin__``, the index it had in the original mapping (or ``new``);
- stages: each stage's ``stage_name``, ``mode`` and its section overrides as the same fields
  as the main form's (``stages[0].buffer.total_steps``; a stage section replaces the global one
  wholesale, so an empty section inherits it), lists of sections left out; beside them a raw
  YAML box per section (``stages[0].buffer``) holding the keys that have no field there (the
  stage's tasksets, keys the form leaves out). The box merges into the section, key by key.

Left out of the form but preserved in the YAML: ``x-unimplemented`` fields, ``x-deprecated``
spellings, ``stage_name`` (set per stage by the engine), ``project`` and ``name`` (the
experiment's own fields; the view writes them into the config). A field's level is the schema's
``x-level``; a ``${oc.env:...}`` value shows what it reads on this server beside the raw text.
Conditional fields carry the schema's ``x-show-when`` with the field's own list indices
(``{"explorer.rollout_model.engine_type": ["vllm"]}``; ``@advantage_fn`` / ``@policy_loss_fn``
mean the effective function, the preset's when the field is empty); the page's JS hides them.
The form decides from those keys only; help texts are shown, never read.

Merging (``merge_form``): the result starts as the original mapping; a field whose posted text
equals the text it was rendered with is unchanged (its original value, ``${oc.env:...}`` included,
stays as written); a changed field sets its parsed value, an emptied one removes the key; a field
left empty that the original did not have adds nothing.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import yaml

from rft_core.config import json_schema
from rft_core.config.committed_names import committed_registered_names
from rft_core.config.presets import PRESETS
from webapp.errors import ActionError
from webapp.experiments.config_policy import parse_yaml, resolved_text

# (title, top-level keys); the keys of "general" are the root's scalars. ``project`` and ``name``
# are the experiment's own Project and Name fields (the view writes them into the config).
SECTIONS = [
    ("general", "General", ["mode", "group", "checkpoint_root_dir", "continue_from_checkpoint"]),
    ("model", "Model", ["model"]),
    ("cluster", "Cluster", ["cluster"]),
    ("algorithm", "Algorithm", ["algorithm"]),
    ("buffer", "Data", ["buffer"]),
    ("explorer", "Explorer", ["explorer"]),
    ("synchronizer", "Synchronizer", ["synchronizer"]),
    ("trainer", "Trainer", ["trainer"]),
    ("monitor", "Monitor", ["monitor"]),
    ("stages", "Stages", ["stages"]),
]  # fmt: skip
STAGE_SECTIONS = ["algorithm", "buffer", "explorer", "synchronizer", "trainer"]
MULTILINE = {"system_prompt", "custom_chat_template", "chat_template"}
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


@dataclass
class Field:
    name: str  # YAML path with list indices: the form field's name
    label: str
    help: str
    kind: str  # string | number | integer | select | bool | yaml
    level: str = "beginner"
    default_text: str = ""
    choices: list[str] = field(default_factory=list)
    optional: bool = False
    multiline: bool = False
    show_when: dict[str, list[str]] | None = None
    text: str = ""  # the value as rendered
    error: str = ""
    escape: bool = False  # a stage section's keys without a field of their own, as YAML
    resolved: str = ""  # what a ``${oc.env:...}`` in ``text`` reads on this server

    @property
    def show_when_json(self) -> str:
        return json.dumps(self.show_when) if self.show_when else ""

    @property
    def options(self) -> list[str]:
        extra = [self.text] if self.text and self.text not in self.choices else []
        return [*self.choices, *extra]


@dataclass
class Group:
    """Fields of one (sub)section, e.g. ``buffer.explorer_input.taskset.format``."""

    name: str
    title: str
    fields: list[Field]
    groups: list[Group] = field(default_factory=list)
    lists: list[ListBlock] = field(default_factory=list)

    @property
    def level(self) -> str:
        """beginner when a beginner field is in it (else the switch hides it whole)."""
        if any(f.level == "beginner" for f in self.fields):
            return "beginner"
        inner = [g.level for g in self.groups] + [b.level for b in self.lists]
        return "beginner" if "beginner" in inner else "expert"


@dataclass
class ListItem:
    index: int
    origin: str  # index in the original list, or "new"
    group: Group


@dataclass
class ListBlock:
    name: str  # buffer.explorer_input.eval_tasksets
    title: str
    help: str
    items: list[ListItem]
    template: Group  # one item with __i__ as its index (the JS clones it)
    level: str = "beginner"


@dataclass
class Section:
    key: str
    title: str
    group: Group


@dataclass
class ExperimentForm:
    sections: list[Section]
    base_yaml: str  # what merge_form merges onto
    errors: dict[str, str] = field(default_factory=dict)  # field name -> message
    top_errors: list[str] = field(default_factory=list)

    def fields(self) -> list[Field]:
        out: list[Field] = []
        for section in self.sections:
            out.extend(_group_fields(section.group))
        return out

    @property
    def presets_json(self) -> str:
        return json.dumps(
            {k: {"advantage_fn": p.advantage_fn, "policy_loss_fn": p.policy_loss_fn} for k, p in PRESETS.items()}
        )  # fmt: skip


def _group_fields(group: Group) -> list[Field]:
    out = list(group.fields)
    for sub in group.groups:
        out.extend(_group_fields(sub))
    for block in group.lists:
        for item in block.items:
            out.extend(_group_fields(item.group))
    return out


# ---------------------------------------------------------------- paths in a mapping

_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def split_path(name: str) -> list[str | int]:
    return [int(i) if i else k for k, i in _TOKEN.findall(name)]


_MISSING = object()


def get_path(data: Any, tokens: list[str | int]) -> Any:
    node = data
    for token in tokens:
        if isinstance(token, int):
            if not isinstance(node, list) or token >= len(node):
                return _MISSING
            node = node[token]
        else:
            if not isinstance(node, Mapping) or token not in node:
                return _MISSING
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
    if value is _MISSING or value is None:
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
        original in (None, _MISSING) or isinstance(original, str)
    )
    if raw_string:
        return text
    try:
        return parse_yaml(text, what=f"{name}")
    except ActionError as err:
        raise ActionError(err.message, errors={name: err.message}) from err


def _norm(text: str) -> str:
    return text.replace("\r\n", "\n").strip()


# ---------------------------------------------------------------- building the form


@cache
def _schema() -> dict[str, Any]:
    return json_schema()


def _kind(prop: dict[str, Any]) -> tuple[str, bool]:
    types = prop.get("type")
    types = types if isinstance(types, list) else [types]
    optional = "null" in types
    main = next((t for t in types if t != "null"), "string")
    if main == "object" or main == "array":
        return "yaml", optional
    if "enum" in prop:
        return "select", optional
    return {"boolean": "bool", "integer": "integer", "number": "number"}.get(
        main, "string"
    ), optional


def _skipped(name: str, prop: dict[str, Any], top: bool) -> bool:
    return bool(
        prop.get("x-unimplemented") or prop.get("x-deprecated") or (top and name == "stage_name")
    )


def _is_section(prop: dict[str, Any]) -> bool:
    return "properties" in prop


def _is_section_list(prop: dict[str, Any]) -> bool:
    return "items" in prop and "properties" in prop["items"]


def _show_when(name: str, prop: dict[str, Any]) -> dict[str, list[str]] | None:
    """The schema's ``x-show-when`` for field ``name``: a condition inside the field's own list
    item names that item's field (``explorer.auxiliary_models[2].engine_type``)."""
    rule = prop.get("x-show-when")
    if not rule:
        return None
    return {_with_indices(path, name): list(values) for path, values in rule.items()}


def _with_indices(path: str, name: str) -> str:
    """Schema ``path`` with each ``[]`` that ``name`` shares the prefix of filled by name's index."""
    for index in re.findall(r"\[(\d+|__i__)\]", name):
        head, sep, _ = path.partition("[]")
        if not sep or not name.startswith(head + f"[{index}]"):
            break
        path = path.replace("[]", f"[{index}]", 1)
    return path


def _scalar_field(name: str, prop: dict[str, Any], value: Any, schema_path: str) -> Field:
    kind, optional = _kind(prop)
    default = prop.get("default")
    default_text = "" if default is None else value_text(default, kind)
    leaf = schema_path.rsplit(".", 1)[-1]
    text = value_text(value, kind)
    return Field(
        name=name,
        label=prop.get("title", leaf),
        help=prop.get("description", ""),
        kind=kind,
        level=prop.get("x-level", "expert"),
        default_text=default_text,
        choices=[c for c in prop.get("enum", []) if c is not None],
        optional=optional,
        multiline=leaf in MULTILINE or "\n" in text,
        show_when=_show_when(name, prop),
        text=text,
        resolved=resolved_text(text) or "",
    )


def _fn_arg_fields(prefix: str, args_key: str, table_key: str, data: Any) -> list[Field]:
    """Real fields for the arguments of the chosen advantage fn / policy loss."""
    by_arg: dict[str, tuple[Any, list[str]]] = {}
    for fn, args in committed_registered_names()[table_key].items():
        for arg, default in args.items():
            by_arg.setdefault(arg, (default, []))[1].append(fn)
    out = []
    selector = "@advantage_fn" if table_key == "advantage_fns" else "@policy_loss_fn"
    for arg, (default, fns) in by_arg.items():
        name = f"{prefix}{args_key}.{arg}"
        kind = {bool: "bool", int: "integer", float: "number"}.get(type(default), "string")
        kind = "number" if default is None else kind
        out.append(
            Field(
                name=name,
                label=arg.replace("_", " ").capitalize(),
                help=f"argument of {', '.join(fns)} ({args_key})",
                kind=kind,
                level="expert",
                default_text="" if default is None else value_text(default, kind),
                show_when={selector: fns},
                text=value_text(get_path(data, split_path(name)), kind),
                optional=default is None,
            )
        )
    return out


def _build_group(obj: dict[str, Any], prefix: str, schema_prefix: str, data: Any, title: str, *, top: bool = False, only: list[str] | None = None, lists: bool = True) -> Group:  # fmt: skip
    group = Group(name=prefix.rstrip("."), title=title, fields=[])
    for key, prop in obj["properties"].items():
        if only is not None and key not in only:
            continue
        if _skipped(key, prop, top):
            continue
        name, spath = f"{prefix}{key}", f"{schema_prefix}{key}"
        if _is_section(prop):
            sub = _build_group(
                prop, f"{name}.", f"{spath}.", data, prop.get("title", key), lists=lists
            )
            group.groups.append(sub)
        elif _is_section_list(prop):
            if lists:
                group.lists.append(_build_list(name, spath, prop, data))
        else:
            group.fields.append(_scalar_field(name, prop, get_path(data, split_path(name)), spath))
            if spath == "algorithm.advantage_fn_args":
                group.fields.extend(_fn_arg_fields(prefix, key, "advantage_fns", data))
            elif spath == "algorithm.policy_loss_fn_args":
                group.fields.extend(_fn_arg_fields(prefix, key, "policy_loss_fns", data))
    return group


def _item_group(name: str, spath: str, prop: dict[str, Any], data: Any, index: str) -> Group:
    item_prefix = f"{name}[{index}]."
    items = prop["items"]
    if spath != "stages":
        return _build_group(items, item_prefix, f"{spath}[].", data, f"#{index}")
    group = _build_group(
        items, item_prefix, "stages[].", data, f"#{index}", only=["stage_name", "mode"]
    )
    for section in STAGE_SECTIONS:
        sname = f"{item_prefix}{section}"
        sub = _build_group(
            items["properties"][section], f"{sname}.", f"stages[].{section}.", data,
            f"{section} (override)", lists=False,
        )  # fmt: skip
        names = {f.name for f in _group_fields(sub)}
        rest = _without_fields(get_path(data, split_path(sname)), sname, names)
        sub.fields.insert(
            0,
            Field(
                name=sname,
                label=f"{section}: other keys (YAML)",
                help=f"this stage's {section} keys that have no field here (its tasksets, ...), as YAML; the stage's {section} replaces the global one wholesale (all empty: inherit it)",
                kind="yaml",
                level="expert",
                text=value_text(rest, "yaml"),
                escape=True,
            ),
        )  # fmt: skip
        group.groups.append(sub)
    return group


def _without_fields(value: Any, prefix: str, names: set[str]) -> Any:
    """``value`` (the mapping at ``prefix``) without the keys that have a field in ``names``;
    ``_MISSING`` when nothing is left."""
    if not isinstance(value, Mapping):
        return _MISSING
    out: dict[str, Any] = {}
    for key, item in value.items():
        path = f"{prefix}.{key}"
        if path in names:
            continue
        if isinstance(item, Mapping) and any(n.startswith(f"{path}.") for n in names):
            inner = _without_fields(item, path, names)
            if inner is not _MISSING:
                out[key] = inner
            continue
        out[key] = item
    return out or _MISSING


def _merge_into(target: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """``extra`` merged into ``target`` key by key (mappings recursively)."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _build_list(name: str, spath: str, prop: dict[str, Any], data: Any) -> ListBlock:
    value = get_path(data, split_path(name))
    items = []
    for i in range(len(value) if isinstance(value, list) else 0):
        items.append(ListItem(i, str(i), _item_group(name, spath, prop, data, str(i))))
    template = _item_group(name, spath, prop, {}, "__i__")
    return ListBlock(
        name=name,
        title=prop.get("title", name),
        help=prop.get("description", ""),
        items=items,
        template=template,
        level=template.level,
    )


def build_form(data: Mapping[str, Any]) -> ExperimentForm:
    """The form for the config mapping ``data`` (interpolations unresolved)."""
    from webapp.experiments.config_policy import canonical_yaml

    schema = _schema()
    sections = []
    for key, title, keys in SECTIONS:
        if key == "general":
            group = _build_group(schema, "", "", data, title, top=True, only=keys)
        elif key == "stages":
            group = Group(name="stages", title=title, fields=[])
            block = _build_list("stages", "stages", schema["properties"]["stages"], data)
            block.level = "beginner"  # the stages editor is the whole section
            group.lists.append(block)
        else:
            group = _build_group(schema["properties"][key], f"{key}.", f"{key}.", data, title)
        sections.append(Section(key, title, group))
    return ExperimentForm(sections=sections, base_yaml=canonical_yaml(dict(data)))


def attach_errors(form: ExperimentForm, errors: Mapping[str, str], message: str = "") -> None:
    """Put each error beside its field (or its closest ancestor), the rest at the top."""
    fields = {f.name: f for f in form.fields()}
    for path, msg in errors.items():
        target = field_for_path(path, set(fields))
        if target is None:
            form.top_errors.append(f"{path}: {msg}" if path else msg)
        else:
            text = msg if target == path else f"{path}: {msg}"
            before = fields[target].error  # two errors under one field: both shown
            fields[target].error = f"{before}; {text}" if before else text
            fields[target].level = "beginner"  # an error shows without the expert switch
            form.errors[target] = fields[target].error
    for block in _blocks(form):
        if any(f.error for item in block.items for f in _group_fields(item.group)):
            block.level = "beginner"
    if message and not errors:
        form.top_errors.append(message)


# ---------------------------------------------------------------- merging a post


def initial_post(form: ExperimentForm) -> dict[str, str]:
    """What a browser posts for ``form`` left as rendered (the list markers included)."""
    post = {f.name: f.text for f in form.fields()}
    for block in _blocks(form):
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
    for block in _blocks(form):
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
        if new_list or get_path(original, split_path(block.name)) is not _MISSING:
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
        before = get_path(original, split_path(original_name)) if original_name else _MISSING
        initial = value_text(before, spec.kind)
        if trust_unchanged and _norm(posted) == _norm(initial):
            continue
        tokens = split_path(result_name)
        if not _norm(posted):
            if spec.kind == "string" and before == "":
                continue  # an empty string as written (response_key: ""): its only rendering
            if before is not _MISSING or not trust_unchanged:
                del_path(result, tokens)
            continue
        if before is _MISSING and _norm(posted) == _norm(spec.default_text):
            continue  # left at the default, not in the original: not added
        try:
            set_path(
                result,
                tokens,
                parse_text(
                    _norm(posted) if spec.kind != "string" else posted.replace("\r\n", "\n"),
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
    before = _MISSING
    if original_name is not None:
        head = original_name[: -len(rest)]
        before = _without_fields(
            get_path(original, split_path(original_name)),
            original_name,
            {head + n for n in relative},
        )
    if trust_unchanged and _norm(posted) == _norm(value_text(before, "yaml")):
        return
    extra = parse_text(_norm(posted), "yaml", None, name) if _norm(posted) else None
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
    for block in _blocks(form):
        if block.name == block_name:
            names = (f.name[len(head) :] for f in _group_fields(block.template))
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


def _blocks(form: ExperimentForm) -> list[ListBlock]:
    out: list[ListBlock] = []

    def walk(group: Group) -> None:
        out.extend(group.lists)
        for sub in group.groups:
            walk(sub)

    for section in form.sections:
        walk(section.group)
    return out


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
    for block in _blocks(form):
        if block.name == block_name:
            for f in _group_fields(block.template):
                if f.name == f"{block_name}[__i__].{rest}":
                    return f
    return None
