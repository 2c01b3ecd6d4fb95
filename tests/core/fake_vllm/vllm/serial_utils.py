"""What ``collective_rpc`` arguments look like after vLLM's msgpack round trip between the LLM
process and the engine core (``vllm/v1/serial_utils.py``, V1 with multiprocessing on, the
default): the arguments are typed ``Any``, so the decoder rebuilds only msgpack's own types.
A tuple arrives as a list, ``bytes`` as ``bytes``, a tensor as the list ``[dtype, shape,
data]`` that the encoder made of it (the data inline here; vLLM puts large buffers aside and
sends their index), and any other object is a ``TypeError`` unless
``VLLM_ALLOW_INSECURE_SERIALIZATION=1``, which pickles it. This is how real vLLM 0.26.0 handed
``rft_load_weights`` lists and failed with ``'list' object has no attribute 'to'`` (issue 21)."""

import pickle
from typing import Any

import msgpack
import torch

from vllm import envs

PICKLE_EXT = 1


def _encode(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        return [
            str(t.dtype).removeprefix("torch."),
            list(t.shape),
            t.view(torch.uint8).numpy().tobytes(),
        ]
    if envs.VLLM_ALLOW_INSECURE_SERIALIZATION:
        return msgpack.ExtType(PICKLE_EXT, pickle.dumps(obj))
    raise TypeError(
        f"Object of type {type(obj)} is not serializable. Set "
        "VLLM_ALLOW_INSECURE_SERIALIZATION=1 to allow fallback to pickle-based serialization."
    )


def _ext(code: int, data: bytes) -> Any:
    if code == PICKLE_EXT:
        return pickle.loads(data)
    return msgpack.ExtType(code, data)


def round_trip(obj: Any) -> Any:
    """``obj`` encoded and decoded as vLLM's engine-core client does."""
    packed = msgpack.packb(obj, default=_encode, use_bin_type=True)
    return msgpack.unpackb(packed, raw=False, ext_hook=_ext, strict_map_key=False)
