"""The registered names as committed in ``registered_names.json`` (torch-free): what the web
process checks configs against and where the schema's plug-in choices come from. The table
its generator is ``rft_core.registries`` (the check: ``rft_core.config.registered``); this module imports nothing of rft_core,
so the schema can read it without an import cycle."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

REGISTERED_NAMES_FILE = Path(__file__).with_name("registered_names.json")


@cache
def committed_registered_names() -> dict[str, Any]:
    """The table as committed in ``registered_names.json`` (torch-free; see the module doc)."""
    return json.loads(REGISTERED_NAMES_FILE.read_text())


def registered_choices(key: str) -> list[str]:
    """The committed names under ``key`` ("kl_fns", "storage_types", "engine_types",
    "monitor_types"), as a field's ``choices``."""
    return list(committed_registered_names()[key])
