"""Workflows that read their own columns of a taskset row (Trinity-RFT's ToolCallWorkflow reads
ToolACE's ``tools`` / ``raw_system`` / ``conversations`` / ``answer``): the ``format`` keys the
validator points at those columns when the taskset leaves ``prompt_key`` / ``response_key`` at
their defaults. Torch-free data, beside the workflow's own ``FORMAT_DEFAULTS``
(``rft_core/workflows/toolcall.py``; ``tests/core/workflows/test_toolcall.py`` checks they agree)."""

from __future__ import annotations

from typing import Any

WORKFLOW_FORMAT_DEFAULTS = {
    "toolcall_workflow": {"prompt_key": "conversations", "response_key": "answer"},
    "tool_call_workflow": {"prompt_key": "conversations", "response_key": "answer"},
}


def point_format_at_workflow_columns(ts: Any) -> None:
    """A taskset of a workflow in ``WORKFLOW_FORMAT_DEFAULTS`` whose ``format.prompt_key`` /
    ``response_key`` are left at their defaults ("prompt", "response") reads that workflow's
    columns instead (Trinity's ToolCallWorkflow reads them from the row itself)."""
    own = WORKFLOW_FORMAT_DEFAULTS.get(ts.default_workflow_type, {})
    if own and (ts.format.prompt_key, ts.format.response_key) == ("prompt", "response"):
        ts.format.prompt_key, ts.format.response_key = own["prompt_key"], own["response_key"]
