"""The experiment form's shape: fields (``Field``) in groups (``Group``, one per (sub)section),
lists of sections (``ListBlock``: tasksets, eval tasksets, stages) with their items and the empty
item the page's JS clones, the page's sections (``Section``) and the whole form
(``ExperimentForm``). Built by ``form_build``, read by the templates and by ``form_merge``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from rft_core.config.presets import PRESETS


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
    template: Group  # one item with ``placeholder`` as its index (the JS clones it)
    level: str = "beginner"
    placeholder: str = "__i__"  # ``__j__`` for a list inside a list item (a stage's tasksets)


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
            out.extend(group_fields(section.group))
        return out

    @property
    def presets_json(self) -> str:
        return json.dumps(
            {k: {"advantage_fn": p.advantage_fn, "policy_loss_fn": p.policy_loss_fn} for k, p in PRESETS.items()}
        )  # fmt: skip


def group_fields(group: Group) -> list[Field]:
    out = list(group.fields)
    for sub in group.groups:
        out.extend(group_fields(sub))
    for block in group.lists:
        for item in block.items:
            out.extend(group_fields(item.group))
    return out


def group_blocks(group: Group, *, templates: bool = False) -> list[ListBlock]:
    """The lists in ``group``, outer before inner: those inside its list items (a stage's eval
    tasksets) and, with ``templates``, those inside the items the JS clones."""
    out: list[ListBlock] = []
    for block in group.lists:
        out.append(block)
        for item in block.items:
            out.extend(group_blocks(item.group, templates=templates))
        if templates:
            out.extend(group_blocks(block.template, templates=True))
    for sub in group.groups:
        out.extend(group_blocks(sub, templates=templates))
    return out


def list_blocks(form: ExperimentForm, *, templates: bool = False) -> list[ListBlock]:
    """Every list of ``form`` (see ``group_blocks``), outer before inner."""
    return [b for s in form.sections for b in group_blocks(s.group, templates=templates)]


def template_fields(form: ExperimentForm) -> list[Field]:
    """The fields of every item the JS clones (a new stage's, a new stage's new eval taskset's)."""
    return [f for b in list_blocks(form, templates=True) for f in group_fields(b.template)]
