"""WebSocket ``/ws/runs/<run_id>/``: live events of one run.

On connect the client may pass ``?after=<event id>`` to first receive what it missed from the
database, then it gets every new event the ingestor fans out to group ``run-<run_id>``.
Anonymous connections are refused. Per-run permission checks are added by the experiments app
through :func:`can_watch`.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from webapp.events.models import RunEvent

REPLAY_LIMIT = 5000


def run_group(run_id: str) -> str:
    return f"run-{run_id}"


def can_watch(user, run_id: str) -> bool:
    """Who may watch a run. Foundation rule: any signed-in user."""
    return bool(user and user.is_authenticated)


class RunEventsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.run_id = self.scope["url_route"]["kwargs"]["run_id"]
        user = self.scope.get("user")
        if not await database_sync_to_async(can_watch)(user, self.run_id):
            await self.close(code=4403)
            return
        self.group = run_group(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        after = _query_int(self.scope.get("query_string", b""), "after")
        if after is not None:
            for message in await self._missed(after):
                await self.send_json(message)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_event(self, event: dict) -> None:
        await self.send_json(event["event"])

    @database_sync_to_async
    def _missed(self, after: int) -> list[dict]:
        rows = RunEvent.objects.filter(run_key=self.run_id, pk__gt=after).order_by("pk")[
            :REPLAY_LIMIT
        ]
        return [row.as_message() for row in rows]


def _query_int(query_string: bytes, name: str) -> int | None:
    from urllib.parse import parse_qs

    values = parse_qs(query_string.decode()).get(name)
    try:
        return int(values[0]) if values else None
    except ValueError:
        return None
