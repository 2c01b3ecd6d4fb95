"""The experiment form built from ``rft_core.config.json_schema()`` section by section
(``build_form``), and the errors of a config put beside their fields (``attach_errors``); the
merge of a posted form is ``form_merge``'s.

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
  wholesale, so an empty section inherits it); the stage's taskset lists as lists of the same
  fields (``stages[0].buffer.explorer_input.eval_tasksets[1].path``; their empty item's index is
  ``__j__``, the stage's own ``__i__``); beside them a raw YAML box per section
  (``stages[0].buffer``) holding the keys that have no field there (the explorer's auxiliary
  models, keys the form leaves out). The box merges into the section, key by key.

Left out of the form but preserved in the YAML: ``x-unimplemented`` fields, ``x-deprecated``
spellings, ``stage_name`` (set per stage by the engine), ``project`` and ``name`` (the
experiment's own fields; the view writes them into the config). A field's level is the schema's
``x-level``; a ``${oc.env:...}`` value shows what it reads on this server beside the raw text.
Conditional fields carry the schema's ``x-show-when`` with the field's own list indices
(``{"explorer.rollout_model.engine_type": ["vllm"]}``; ``@advantage_fn`` / ``@policy_loss_fn``
mean the effective function, the preset's when the field is empty); the page's JS hides them.
The form decides from those keys only; help texts are shown, never read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from rft_core.config import json_schema
from rft_core.config.committed_names import committed_registered_names
from webapp.experiments.config_policy import resolved_text
from webapp.experiments.form_model import (
    ExperimentForm,
    Field,
    Group,
    ListBlock,
    ListItem,
    Section,
    group_blocks,
    group_fields,
    list_blocks,
)
from webapp.experiments.form_values import (
    field_for_path,
    get_path,
    split_path,
    value_text,
    without_fields,
)

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
    for index in re.findall(r"\[(\d+|__i__|__j__)\]", name):
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
            f"{section} (override)", lists=section == "buffer",
        )  # fmt: skip
        # a stage's taskset lists are lists of fields like the main form's; the box leaves them out
        names = {f.name for f in group_fields(sub)} | {b.name for b in group_blocks(sub)}
        rest = without_fields(get_path(data, split_path(sname)), sname, names)
        sub.fields.insert(
            0,
            Field(
                name=sname,
                label=f"{section}: other keys (YAML)",
                help=f"this stage's {section} keys that have no field here, as YAML; the stage's {section} replaces the global one wholesale (all empty: inherit it)",
                kind="yaml",
                level="expert",
                text=value_text(rest, "yaml"),
                escape=True,
            ),
        )  # fmt: skip
        group.groups.append(sub)
    return group


def _build_list(name: str, spath: str, prop: dict[str, Any], data: Any) -> ListBlock:
    value = get_path(data, split_path(name))
    items = []
    for i in range(len(value) if isinstance(value, list) else 0):
        items.append(ListItem(i, str(i), _item_group(name, spath, prop, data, str(i))))
    placeholder = "__j__" if "[" in name else "__i__"  # a list inside a list item
    template = _item_group(name, spath, prop, {}, placeholder)
    return ListBlock(
        name=name,
        title=prop.get("title", name),
        help=prop.get("description", ""),
        items=items,
        template=template,
        level=template.level,
        placeholder=placeholder,
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
    for block in list_blocks(form):
        if any(f.error for item in block.items for f in group_fields(item.group)):
            block.level = "beginner"
    if message and not errors:
        form.top_errors.append(message)
