"""The synchronizer: coordinates weight versions between the trainer and the explorer.

The trainer *publishes* a version (its step) after each sync step; the explorer at its sync
point *waits* for the version its schedule names (``rft_core.sync.schedule``) and loads it. How
the weights travel depends on ``synchronizer.sync_method``:

- ``memory``: the state dict goes through the Ray object store (one ``ray.put`` by the trainer,
  one ``ray.get`` by each explorer), or, in one process, the trainer's tensors go to the engine;
- ``checkpoint``: the trainer writes ``global_step_N/actor`` weights with
  ``save_state_dict_for_sync`` (``latest_state_dict_iteration.txt``) and the explorer reads them;
- ``nccl``: a ``torch.distributed`` broadcast in packed buckets (``rft_core.sync.nccl``); the
  synchronizer only carries the rendezvous address and the tensor list.

The final weights at end of data always travel through the object store, so the explorer's
closing evaluation sees the trained policy whatever the method.

``Synchronizer`` is a Ray async actor (named ``<job>/synchronizer``) so that waits never block
the other side; ``WeightSender``/``WeightReceiver`` are the trainer's and the explorer's halves.
``InProcessSynchronizer`` is the same bookkeeping for an explorer and a trainer driven in one
process (``rft_core.runtime.in_process``): its methods are plain calls, ``memory`` hands the trainer's
own tensors to the engine (no object store, no copy to the CPU), and nothing here imports Ray
until a Ray synchronizer is used.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import torch

from rft_core.actors.actor_log import log_to_file
from rft_core.checkpoint.layout import actor_dir
from rft_core.checkpoint.store import load_step_weights, save_state_dict_for_sync
from rft_core.errors import ActorFailed, ServiceUnavailable
from rft_core.sync.nccl import BroadcastGroup, TensorMeta, free_port, tensor_metas

SYNC_METHODS = ("memory", "checkpoint", "nccl")

log = logging.getLogger("rft_core.synchronizer")


class Synchronizer:
    """Version bookkeeping shared by the trainer and the explorer (run as a Ray async actor)."""

    def __init__(self, sync_method: str, sync_timeout: float, log_path: str | None = None):
        log_to_file(log_path, log.name)
        self.sync_method = sync_method
        self.sync_timeout = float(sync_timeout)
        self.version = 0  # latest version the trainer published
        self.payload: Any = None  # transport data of ``self.version``
        self.final = False  # the trainer finished; ``self.version`` is its last step
        self.trainer_error: str | None = None
        self.explorer_done = False
        self.requested: set[int] = set()  # versions an explorer will receive by broadcast
        self.receivers = 1  # ranks the explorer brings to a broadcast (a vLLM engine: its TP)
        self.cond = asyncio.Condition()

    async def publish(self, version: int, payload: Any = None, final: bool = False) -> None:
        async with self.cond:
            self.version, self.payload = version, payload
            self.final = self.final or final
            self.cond.notify_all()
        log.info("trainer published weights version %d%s", version, " (final)" if final else "")

    async def trainer_failed(self, error: str) -> None:
        async with self.cond:
            self.trainer_error = error
            self.cond.notify_all()

    async def explorer_finished(self) -> None:
        async with self.cond:
            self.explorer_done = True
            self.cond.notify_all()

    async def wait_version(
        self, version: int, timeout: float | None = None
    ) -> tuple[int, Any, bool]:
        """Wait until the trainer published ``version`` (or later, or finished). Returns
        ``(version, payload, final)`` of the latest publication."""
        timeout = self.sync_timeout if timeout is None else timeout
        async with self.cond:
            try:
                await asyncio.wait_for(self.cond.wait_for(lambda: self.has(version)), timeout)
            except TimeoutError:
                return -1, None, False
            if self.trainer_error is not None:
                raise ActorFailed(f"trainer failed: {self.trainer_error}")
            return self.version, self.payload, self.final

    def has(self, version: int) -> bool:
        """``wait_version(version)`` returns at once."""
        return self.version >= version or self.final or self.trainer_error is not None

    async def request_broadcast(self, version: int, receivers: int = 1) -> None:
        """The explorer announces it will join the broadcast of ``version`` (nccl) with
        ``receivers`` ranks (1, or a vLLM engine's workers, one per tensor-parallel rank)."""
        async with self.cond:
            self.requested.add(version)
            self.receivers = int(receivers)
            self.cond.notify_all()

    async def wait_receiver(self, version: int, timeout: float | None = None) -> bool:
        """The trainer (nccl) waits for an explorer to join the broadcast of ``version``;
        False when the explorer finished without asking for it."""
        timeout = self.sync_timeout if timeout is None else timeout
        async with self.cond:
            try:
                await asyncio.wait_for(
                    self.cond.wait_for(lambda: version in self.requested or self.explorer_done),
                    timeout,
                )
            except TimeoutError:
                return False
            return version in self.requested

    def state(self) -> dict[str, Any]:
        return {
            "sync_method": self.sync_method,
            "version": self.version,
            "final": self.final,
            "explorer_done": self.explorer_done,
            "receivers": self.receivers,
        }


class InProcessSynchronizer:
    """``Synchronizer``'s methods as plain calls, for an explorer and a trainer in one process
    (one thread: nothing can publish while a wait waits, so a wait for a version not yet
    published fails at once; the driver steps the trainer before the explorer's sync)."""

    def __init__(self, sync_method: str, sync_timeout: float, log_path: str | None = None):
        self.synchronizer = Synchronizer(sync_method, sync_timeout, log_path)
        self._loop = asyncio.new_event_loop()

    def call(self, method: str, *args: Any) -> Any:
        if method == "wait_version" and not self.synchronizer.has(args[0]):
            return -1, None, False  # one thread: nothing can publish while this one waits
        result = getattr(self.synchronizer, method)(*args)
        if asyncio.iscoroutine(result):
            return self._loop.run_until_complete(result)
        return result

    def close(self) -> None:
        self._loop.close()


def sync_call(synchronizer: Any, method: str, *args: Any, timeout: float | None = None) -> Any:
    """``synchronizer.<method>(*args)`` on a Ray actor handle or an ``InProcessSynchronizer``."""
    if isinstance(synchronizer, InProcessSynchronizer):
        return synchronizer.call(method, *args)

    # no Ray in the in-process run (GPU machine)
    import ray

    return ray.get(getattr(synchronizer, method).remote(*args), timeout=timeout)


def start_synchronizer(
    name: str, sync_method: str, sync_timeout: float, log_path: str | None = None
) -> Any:
    """Start the synchronizer actor under ``name`` (Ray must be initialised)."""
    # no Ray in the in-process run (GPU machine)
    import ray

    actor_cls = ray.remote(num_cpus=0)(Synchronizer)
    return actor_cls.options(name=name).remote(sync_method, sync_timeout, log_path)


class _WeightEnd:
    """What both ends of a weight transfer hold."""

    def __init__(
        self,
        synchronizer: Any,
        sync_method: str,
        job_dir: str,
        sync_timeout: float,
        device: str = "cpu",
    ):
        self.synchronizer = synchronizer
        self.sync_method = sync_method
        self.job_dir = job_dir
        self.sync_timeout = float(sync_timeout)
        self.device = device
        self.group: BroadcastGroup | None = None

    @property
    def in_process(self) -> bool:
        """Both ends live in this process (``InProcessSynchronizer``)."""
        return isinstance(self.synchronizer, InProcessSynchronizer)

    def _call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        return sync_call(self.synchronizer, method, *args, timeout=timeout)


class WeightSender(_WeightEnd):
    """The trainer's half: publish weights after a sync step. Without a synchronizer actor
    (``mode: train``, the explorer is another job) only ``checkpoint`` applies: the weights land
    in the job dir, where the explore job's ``CheckpointWatch`` finds them."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rendezvous: dict[str, Any] | None = None
        self._final_ref: Any = None

    def send(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        if self.sync_method == "memory":
            self._call("publish", version, [self._memory_payload(state_dict)])
        elif self.sync_method == "checkpoint":
            path = save_state_dict_for_sync(self.job_dir, version, state_dict)
            if self.synchronizer is None:
                log.info("published weights version %d in %s", version, actor_dir(path))
                return
            self._call("publish", version, None)
        elif self.sync_method == "nccl":
            if self.in_process:
                raise ValueError("nccl sync needs two processes; in one, use memory")

            # no Ray in the in-process run (GPU machine)
            import ray

            metas = tensor_metas(state_dict)
            if self.rendezvous is None:
                self.rendezvous = {"addr": ray.util.get_node_ip_address(), "port": free_port()}
            payload = dict(self.rendezvous, metas=metas)
            self._call("publish", version, payload)
            joined = self._call(
                "wait_receiver", version, self.sync_timeout, timeout=self.sync_timeout + 30
            )
            if not joined:  # the explorer finished, or did not come within sync_timeout
                if self._call("state")["explorer_done"]:
                    # its last steps are done: the final weights still reach its closing eval
                    log.info("weights version %d: the explorer has finished; not sent", version)
                else:
                    log.warning(
                        "weights version %d: no explorer joined the broadcast within "
                        "synchronizer.sync_timeout (%gs); not sent",
                        version,
                        self.sync_timeout,
                    )
                return
            if self.group is None:  # the trainer (rank 0) and the explorer's receiving ranks
                receivers = int(self._call("state").get("receivers", 1))
                self.group = BroadcastGroup(
                    self.rendezvous["addr"],
                    self.rendezvous["port"],
                    0,
                    1 + receivers,
                    self.device,
                    self.sync_timeout,
                )
            self.group.send(state_dict, metas)
        else:
            raise ValueError(f"unknown sync method {self.sync_method!r}")

    def send_final(self, version: int, state_dict: dict[str, torch.Tensor]) -> None:
        if self.synchronizer is None:  # the final checkpoint already points at these weights
            return
        # the final weights always go through memory (no broadcast partner waits)
        self._final_ref = self._memory_payload(state_dict)
        self._call("publish", version, [self._final_ref], True)

    def _memory_payload(self, state_dict: dict[str, torch.Tensor]) -> Any:
        """In one process the tensors themselves; else a CPU copy in Ray's object store."""
        if self.in_process:
            return state_dict

        # no Ray in the in-process run (GPU machine)
        import ray

        return ray.put({k: v.detach().cpu() for k, v in state_dict.items()})

    def trainer_failed(self, error: str) -> None:
        self._call("trainer_failed", error)


class WeightReceiver(_WeightEnd):
    """The explorer's half: at a sync point, wait for the scheduled version and load it."""

    def receive(
        self, version: int, final: bool = False, engine: Any = None
    ) -> tuple[int, dict[str, torch.Tensor] | None]:
        """Wait (at most ``sync_timeout``) for ``version``; returns ``(version, state_dict)``,
        or ``(version, None)`` when nothing newer than what the engine has arrived, or when an
        ``engine`` with ``receive_broadcast`` (vLLM: its workers join the nccl broadcast
        themselves) has already loaded it."""
        direct = engine is not None and hasattr(engine, "receive_broadcast")
        if self.sync_method == "nccl" and not final:
            receivers = engine.broadcast_receivers if direct else 1
            self._call("request_broadcast", version, receivers)
        got, payload, is_final = self._call(
            "wait_version", version, self.sync_timeout, timeout=self.sync_timeout + 30
        )
        if got < 0 and self.in_process:
            raise ActorFailed(
                f"the trainer had not published the weights of step {version} when the explorer "
                f"synced ({self.sync_method} sync, one process): the steps ran out of schedule"
            )
        if got < 0:
            raise ServiceUnavailable(
                f"explorer waited synchronizer.sync_timeout={self.sync_timeout:g}s for the trainer's "
                f"weights of step {version} ({self.sync_method} sync) and they did not come; see "
                "log/trainer.log, or raise synchronizer.sync_timeout when trainer steps are slow"
            )
        if isinstance(payload, list):  # memory, or the final weights
            if isinstance(payload[0], dict):  # the trainer's tensors, in this process
                return got, payload[0]

            # no Ray in the in-process run (GPU machine)
            import ray

            return got, ray.get(payload[0])  # an object-store ref
        if self.sync_method == "checkpoint":
            return got, load_step_weights(self.job_dir, got)
        if self.sync_method == "nccl":
            if got != version:  # the trainer will not broadcast this one
                return got, None
            metas = [m if isinstance(m, TensorMeta) else TensorMeta(*m) for m in payload["metas"]]
            if direct:
                engine.receive_broadcast(
                    payload["addr"], payload["port"], metas, got, self.sync_timeout
                )
                return got, None
            if self.group is None:
                self.group = BroadcastGroup(
                    payload["addr"], payload["port"], 1, 2, self.device, self.sync_timeout
                )
            return got, self.group.receive(metas)
        return got, None

    def explorer_finished(self) -> None:
        self._call("explorer_finished")
