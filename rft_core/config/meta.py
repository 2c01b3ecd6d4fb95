"""Field metadata, declared once beside each default (``field(metadata=...)``):

- ``help``: one line shown in the reference YAML, the JSON schema and the web forms;
- ``choices``: allowed values of an enum-like string (matched case-insensitively);
- ``aliases``: other spellings users write (``sync_method: online`` means ``nccl``);
- ``level``: ``beginner`` (shown in the simple web form) or ``expert``; the fields of an optional
  section or list item (``tasksets``, ``experience_buffer``, ...) are expert when that section
  is, and a section that lists ``beginner_keys`` (paths within it) shows a beginner only those
  of its beginner fields (``taskset`` and ``eval_tasksets`` share one class but not the keys a
  beginner fills in: ``rft_core.config.fields.inner_cap``);
- ``derived_from``: the YAML paths the validator fills the field from when it is left unset
  (``[]``: a fixed choice of the validator); a path starting with ``.`` is within the field's
  own section (``.rollout_args.n``). Present means "derived": the field defaults to ``None``;
- ``show_when``: the form shows the field only when other fields hold one of the listed values
  (``{".engine_type": ["vllm"]}``, paths as in ``derived_from``);
- ``deprecated``: an older spelling that is read as another key (mapped by
  ``rft_core.config.trinity_compat``); the value names the key to write instead. Forms leave it
  out;
- ``refused``: values of a choice field refused with a reason (name -> the sentence that follows
  the quoted value) instead of a "did you mean" (Trinity-RFT algorithms not implemented here);
- ``unimplemented``: a Trinity-RFT key that RFT Studio accepts (so other users' configs load)
  but does not act on; its help says so and ``rft_core.config.unimplemented`` logs a warning
  when a config sets it to anything but the default.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

BEGINNER = "beginner"
EXPERT = "expert"

UNIMPLEMENTED_NOTE = "[accepted for Trinity-RFT compatibility, not implemented by RFT Studio: a non-default value logs a warning and has no effect]"


def config_field(
    default: Any = None,
    help: str = "",
    *,
    choices: list[str] | None = None,
    aliases: dict[str, str] | None = None,
    refused: dict[str, str] | None = None,
    level: str = EXPERT,
    factory: Any = None,
    unimplemented: bool = False,
    derived_from: list[str] | None = None,
    show_when: dict[str, list[Any]] | None = None,
    deprecated: str | None = None,
    beginner_keys: list[str] | None = None,
) -> Any:
    """A dataclass field carrying its metadata (see the module docstring). The help text is
    shown, never parsed: what a program decides from, it reads from the other keys."""
    if unimplemented:
        help = f"{help} {UNIMPLEMENTED_NOTE}" if help else UNIMPLEMENTED_NOTE
    if derived_from is not None and (default is not None or factory is not None):
        raise ValueError(f"a derived field defaults to None (derived_from {derived_from})")
    metadata: dict[str, Any] = {"help": help, "level": level}
    if derived_from is not None:
        metadata["derived_from"] = list(derived_from)
    if show_when:
        metadata["show_when"] = dict(show_when)
    if deprecated:
        metadata["deprecated"] = deprecated
    if beginner_keys is not None:
        metadata["beginner_keys"] = list(beginner_keys)
    if choices is not None:
        metadata["choices"] = choices
    if aliases:
        metadata["aliases"] = aliases
    if refused:
        metadata["refused"] = refused
    if unimplemented:
        metadata["unimplemented"] = True
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)
