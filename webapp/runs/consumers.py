"""WebSocket ``/ws/runs/<run pk>/``: the live messages of one run (``webapp.runs.live``).

On connect the one access rule (``webapp.accounts.access``) decides: anonymous -> close 4403;
a run that does not exist -> close 4404; another user's run -> close 4403 and an audit row
``permission.denied``; the owner and staff are accepted and join the Channels group
``run-<pk>``. Every group message (Channels type ``live.message``, the protocol message
serialized once under ``text``) is forwarded as is:

    {"type": "events", "first_seq", "last_seq", "events": [Event, ...]}  one ingestor batch
    {"type": "run", "run": RunState}                                     publish_run
    {"type": "checkpoint", "checkpoint": CheckpointState}                publish_checkpoint (checkpoints)

``?after=<seq>`` (a client that reconnects) first sends what it missed as ONE ``events``
message (at most 5000 events, the page refetches ``live.json?after=`` for the rest): the
consumer joins the group before it reads, so nothing falls between; an event that arrives both
ways carries the same seq and the client ignores the second.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.core.exceptions import PermissionDenied
from django.http import Http404

from webapp.accounts.access import authorize
from webapp.audit.record import Actor
from webapp.runs.live import MESSAGE_TYPE, events_after, events_message, run_group
from webapp.runs.models import Run

REPLAY_LIMIT = 5000
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404

__all__ = ["LiveConsumer", "RunEventsConsumer", "run_group", "watchable_run"]


def watchable_run(scope: dict, run_pk: str) -> Run:
    """The run the connection may watch; Http404 / PermissionDenied (audited) otherwise."""
    actor = Actor.from_scope(scope)
    if actor.user is None:
        raise PermissionDenied("sign in to watch a run")
    return authorize(actor, Run, run_pk, "run.watch")


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """A consumer that forwards ``live.message`` group messages. Channels runs
    ``close_old_connections`` in a worker thread before EVERY handler; forwarding a message
    touches no database, so it skips that hop (one thread hop per message per client: with 50
    clients on a run, 50 queued hops through the one thread-sensitive executor per batch)."""

    async def dispatch(self, message: dict) -> None:
        if message.get("type") == MESSAGE_TYPE:
            await self.live_message(message)
        else:
            await super().dispatch(message)

    async def live_message(self, event: dict) -> None:
        raise NotImplementedError


class RunEventsConsumer(LiveConsumer):
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
            missed = await self._missed(after)
            if missed is not None:
                await self.send_json(missed)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def live_message(self, event: dict) -> None:
        if "text" in event:  # webapp.runs.live.send: the message already serialized, once
            await self.send(text_data=event["text"])
        else:
            await self.send_json(event["message"])

    @database_sync_to_async
    def _missed(self, after: int) -> dict | None:
        events = events_after(self.run, after, limit=REPLAY_LIMIT)["events"]
        return events_message(events) if events else None


def _query_int(query_string: bytes, name: str) -> int | None:
    values = parse_qs(query_string.decode()).get(name)
    try:
        return int(values[0]) if values else None
    except ValueError:
        return None
