"""A Channels message round trip through channels_redis on the real Redis."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer


def test_a_group_message_reaches_every_member_channel(unique_id):
    layer = get_channel_layer()
    assert type(layer).__module__.startswith("channels_redis")

    async def scenario():
        a = await layer.new_channel()
        b = await layer.new_channel()
        await layer.group_add(f"run-{unique_id}", a)
        await layer.group_add(f"run-{unique_id}", b)
        await layer.group_send(
            f"run-{unique_id}", {"type": "run.event", "event": {"step": 5, "value": 0.75}}
        )
        got = [await layer.receive(a), await layer.receive(b)]
        await layer.group_discard(f"run-{unique_id}", a)
        await layer.group_discard(f"run-{unique_id}", b)
        return got

    got = async_to_sync(scenario)()
    assert got == [{"type": "run.event", "event": {"step": 5, "value": 0.75}}] * 2
