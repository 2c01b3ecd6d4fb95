"""Field metadata, declared once beside each default (``field(metadata=...)``):

- ``help``: one line shown in the reference YAML, the JSON schema and the web forms;
- ``choices``: allowed values of an enum-like string (matched case-insensitively);
- ``aliases``: other spellings users write (``sync_method: online`` means ``nccl``);
- ``level``: ``beginner`` (shown in the simple web form) or ``expert``;
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
) -> Any:
    """A dataclass field carrying its metadata (see the module docstring)."""
    if unimplemented:
        help = f"{help} {UNIMPLEMENTED_NOTE}" if help else UNIMPLEMENTED_NOTE
    metadata: dict[str, Any] = {"help": help, "level": level}
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
