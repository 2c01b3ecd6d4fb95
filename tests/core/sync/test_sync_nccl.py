"""``nccl`` weight sync through gloo between two Ray actors: the receiver ends up with weights
identical to the sender's, through several packed buckets."""

import sys

import ray
import torch

from rft_core.sync.nccl import BroadcastGroup, bucket_plan, free_port, tensor_metas


def _state_dict(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(50, 16, generator=g),
        "layer.0.weight": torch.randn(16, 16, generator=g),
        "layer.0.bias": torch.randn(16, generator=g),
        "norm.weight": torch.randn(16, generator=g).to(torch.bfloat16),
        "norm.bias": torch.randn(16, generator=g).to(torch.bfloat16),
        "head.weight": torch.randn(50, 16, generator=g),
    }


@ray.remote(num_cpus=0)
class Side:
    def __init__(self, seed: int):
        self.sd = _state_dict(seed)

    def addr(self) -> str:
        return ray.util.get_node_ip_address()

    def send(self, addr: str, port: int, bucket_bytes: int) -> int:
        group = BroadcastGroup(addr, port, rank=0, world_size=2, timeout_s=60)
        return group.send(self.sd, tensor_metas(self.sd), bucket_bytes)

    def receive(self, addr: str, port: int, metas, bucket_bytes: int) -> dict:
        group = BroadcastGroup(addr, port, rank=1, world_size=2, timeout_s=60)
        got = group.receive(metas, bucket_bytes)
        return {k: v.clone() for k, v in got.items()}


def test_bucket_plan_splits_by_dtype_and_size():
    metas = tensor_metas(_state_dict(0))
    plan = bucket_plan(metas, bucket_bytes=4 * 16 * 16 + 4 * 16)
    # embed (3200 B) alone; layer.0.weight+bias (1088 B) fit; bf16 norms together; head alone
    assert [[m.name for m in b] for b in plan] == [
        ["embed.weight"],
        ["layer.0.weight", "layer.0.bias"],
        ["norm.weight", "norm.bias"],
        ["head.weight"],
    ]


def test_gloo_broadcast_between_two_ray_actors_gives_identical_weights():
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    # the actor class lives in this test module, which Ray workers cannot import by name
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        sender, receiver = Side.remote(1), Side.remote(2)
        addr = ray.get(sender.addr.remote())
        port = free_port()
        metas = tensor_metas(_state_dict(1))
        sent = sender.send.remote(addr, port, 1088)
        received = receiver.receive.remote(addr, port, metas, 1088)
        assert ray.get(sent, timeout=120) == 4
        got = ray.get(received, timeout=120)
        expected = _state_dict(1)
        assert set(got) == set(expected)
        for name, tensor in expected.items():
            assert got[name].dtype == tensor.dtype
            assert torch.equal(got[name], tensor), name
        # the receiver's own (different) weights were really replaced
        assert not torch.equal(_state_dict(2)["head.weight"], got["head.weight"])
    finally:
        ray.shutdown()
