"""tests/core is laid out like rft_core (``config/``, ``trainer/``, ``runtime/``, ...; the tests
of rft_core's top-level modules stay here). The helper modules the folders share (``tiny_lm``,
``checkpoint_fixtures``, ``convert_fixtures``, ``in_process_script``) and the data beside them
(``fake_vllm/``, ``trinity_configs/``, ``broken_configs/``) stay in this folder too: it is put on
``sys.path`` here, so ``from tiny_lm import build_tiny_model`` works from any subfolder."""

from __future__ import annotations

import sys
from pathlib import Path

CORE_TESTS = str(Path(__file__).resolve().parent)
if CORE_TESTS not in sys.path:
    sys.path.insert(0, CORE_TESTS)
