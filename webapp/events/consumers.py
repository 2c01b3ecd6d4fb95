"""WebSocket ``/ws/runs/<run pk>/``: live events of one run.

On connect the one access rule (``webapp.accounts.access``) decides: anonymous -> close 4403;
a run that does not exist -> close 4404; another user's run -> close 4403 and an audit row
``permission.denied``; the owner and staff are accepted and join the Channels group
``run-<pk>``, into which the ingestor fans out each new event (``RunEvent.as_message()``).
The client may pass ``?after=<event id>`` to first receive what it missed from the database.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.core.exceptions import PermissionDenied
from django.http import Http404

from webapp.accounts.access import authorize
from webapp.audit.record import Actor
from webapp.events.models import RunEvent
from webapp.runs.models import Run

REPLAY_LIMIT = 5000
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404


def run_group(run_pk: int) -> str:
    """The Channels group of a run's live events."""
    return f"run-{run_pk}"


def watchable_run(scope: dict, run_pk: str) -> Run:
    """The run the connection may watch; Http404 / PermissionDenied (audited) otherwise."""
    actor = Actor.from_scope(scope)
    if actor.user is None:
        raise PermissionDenied("sign in to watch a run")
    return authorize(actor, Run, run_pk, "run.watch")


class RunEventsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        try:
            self.run = await database_sync_to_async(watchable_run)(
                self.scope, self.scope["url_route"]["kwargs"]["run_id"]
            )
        except PermissionDenied:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        except Http404:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = run_group(self.run.pk)
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
        rows = RunEvent.objects.filter(run_key=self.run.key, pk__gt=after).order_by("pk")[
            :REPLAY_LIMIT
        ]
        return [row.as_message() for row in rows]


def _query_int(query_string: bytes, name: str) -> int | None:
    values = parse_qs(query_string.decode()).get(name)
    try:
        return int(values[0]) if values else None
    except ValueError:
        return None
