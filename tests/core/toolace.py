"""A ToolACE row (Tool-N1's function-calling data, the columns Trinity's toolace config reads:
``tools``, ``raw_system``, ``conversations``, ``answer``) and the calls its answer holds; for
``workflows/test_toolcall.py`` and the toolace config's run in ``runtime/test_trinity_config_runs.py``."""

from __future__ import annotations

import json

CALLS = [
    {"name": "weather", "arguments": {"city": "Paris", "unit": "C"}},
    {"name": "time", "arguments": {"zone": "CET"}},
]
TRUTH = json.dumps(CALLS)
TOOLACE_ROW = {
    "tools": json.dumps(
        [{"name": "weather", "description": "today's weather", "parameters": {"type": "object"}}]
    ),
    "raw_system": "You are a helpful assistant.",
    "conversations": [
        {"from": "user", "value": "Weather in Paris?"},
        {"from": "function_call", "value": {"name": "weather", "arguments": {"city": "Paris"}}},
        {"from": "observation", "value": "18 C"},
        {"from": "gpt", "value": "It is 18 C."},
    ],
    "answer": TRUTH,
}
