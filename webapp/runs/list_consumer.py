"""WebSocket ``/ws/runs/``: the list feed the experiment list and an experiment's run list
update from without a reload.

On connect: anonymous -> close 4403; a signed-in user joins ``runs-user-<user pk>`` and staff
also ``runs-staff``. ``webapp.runs.live.publish_run`` sends every change of a run's state
(``{"type": "run", "run": RunState}``, inside live.py's Channels envelope
``{"type": "live.message", "message": ...}``) to its owner's group and to the staff group, and
this consumer forwards it as it is (a bare ``{"type": "run", "run": ...}`` group message too).
Only ``run`` messages pass: the list feed carries run states and nothing else. A user therefore never receives another user's runs: nothing
but ``publish_run`` writes to a user's group, and only for runs of that user's experiments.
The client sends nothing; anything it sends is ignored.
"""

from __future__ import annotations

from webapp.runs.consumers import LiveConsumer
from webapp.runs.live import STAFF_GROUP, user_group

CLOSE_FORBIDDEN = 4403

__all__ = ["STAFF_GROUP", "RunListConsumer", "user_group"]


class RunListConsumer(LiveConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_active:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.groups_joined = [user_group(user.pk)]
        if user.is_staff:
            self.groups_joined.append(STAFF_GROUP)
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        return None  # a one-way feed

    async def live_message(self, event: dict) -> None:
        """live.py's envelope: ``{"type": "live.message", "kind": "run", "text": "<JSON>"}``
        (or the message itself under ``"message"``); only run states go to the list feed."""
        if "text" in event:
            if event.get("kind") == "run":
                await self.send(text_data=event["text"])
            return
        message = event.get("message") or {}
        if message.get("type") == "run" and isinstance(message.get("run"), dict):
            await self.send_json({"type": "run", "run": message["run"]})

    async def run(self, event: dict) -> None:
        """A bare ``{"type": "run", "run": RunState}`` group message, forwarded unchanged."""
        await self.send_json({"type": "run", "run": event["run"]})
