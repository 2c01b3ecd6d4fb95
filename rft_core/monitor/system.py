"""System metrics of a run's actor: CPU and memory of its process tree (the actor and the
engine processes it started) and of its host, and utilisation and memory of each GPU it sees.

Every ``monitor.system_metrics_interval`` seconds a daemon thread of the actor's
:class:`~rft_core.monitor.Monitor` writes one ``metric`` event (the same stream as the training
metrics, at the actor's latest step) named ``system/<role>/<what>``:

    cpu_percent          the process tree's CPU use (100 = one core busy)
    memory_rss_gb        the process tree's resident memory
    host_cpu_percent     the host's CPU use (100 = every core busy)
    host_memory_percent  the host's memory in use
    gpu<i>/utilization_percent, gpu<i>/memory_used_gb, gpu<i>/memory_percent
                         each GPU the process sees (``CUDA_VISIBLE_DEVICES`` order), through NVML

``psutil`` reads CPU and memory. NVML comes from ``nvidia-ml-py`` (module ``pynvml``), imported
only here and only when sampling starts; without the package, the driver or a GPU the GPU
metrics are left out and nothing else changes.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import psutil

log = logging.getLogger(__name__)

GB = 1024**3


class GpuReader:
    """Utilisation and memory of the GPUs this process sees, through NVML; ``available`` is
    False (and :meth:`read` returns nothing) where there is no NVML or no GPU."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self._nvml: Any = None
        try:
            import pynvml
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in _visible_gpus(pynvml)]
        except pynvml.NVMLError as err:  # no driver, no GPU
            log.debug("system metrics: no GPU metrics (%s)", err)
            self.handles = []
            return
        self._nvml = pynvml

    @property
    def available(self) -> bool:
        return bool(self.handles)

    def read(self) -> dict[str, float]:
        out: dict[str, float] = {}
        nvml = self._nvml
        for i, handle in enumerate(self.handles):
            try:
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            except nvml.NVMLError as err:  # a GPU fallen off the bus: say so once, go on
                log.warning("system metrics: GPU %d unreadable: %s", i, err)
                continue
            out[f"gpu{i}/utilization_percent"] = float(util.gpu)
            out[f"gpu{i}/memory_used_gb"] = mem.used / GB
            out[f"gpu{i}/memory_percent"] = 100.0 * mem.used / mem.total if mem.total else 0.0
        return out

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml = None


def _visible_gpus(nvml: Any) -> list[int]:
    """NVML indices of the GPUs ``CUDA_VISIBLE_DEVICES`` lets this process use (all when unset;
    UUIDs and MIG names are not mapped: then all)."""
    count = nvml.nvmlDeviceGetCount()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    if not all(v.isdigit() for v in wanted):
        return list(range(count))
    return [int(v) for v in wanted if int(v) < count]


class SystemSampler:
    """Reads the metrics above for the current process tree; ``sample()`` returns them without
    the ``system/<role>/`` prefix. CPU percentages are over the time since the previous sample
    (the first call primes the counters and reports 0)."""

    def __init__(self, gpu: GpuReader | None = None):
        self._psutil = psutil
        self.process = psutil.Process()
        self.gpu = gpu if gpu is not None else GpuReader()
        self._procs: dict[int, Any] = {}
        psutil.cpu_percent(None)

    def _tree(self) -> list[Any]:
        psutil = self._psutil
        try:
            found = [self.process, *self.process.children(recursive=True)]
        except psutil.Error:
            found = [self.process]
        # keep the Process objects: cpu_percent(None) measures since the same object's last call
        procs = {p.pid: self._procs.get(p.pid, p) for p in found}
        self._procs = procs
        return list(procs.values())

    def sample(self) -> dict[str, float]:
        psutil = self._psutil
        cpu = rss = 0.0
        for proc in self._tree():
            try:
                cpu += proc.cpu_percent(None)
                rss += proc.memory_info().rss
            except psutil.Error:  # exited between listing and reading
                continue
        out = {
            "cpu_percent": cpu,
            "memory_rss_gb": rss / GB,
            "host_cpu_percent": psutil.cpu_percent(None),
            "host_memory_percent": psutil.virtual_memory().percent,
        }
        out.update(self.gpu.read())
        return out

    def close(self) -> None:
        self.gpu.close()


class SystemMetricsThread:
    """Calls ``emit(metrics)`` with ``system/<role>/...`` metrics every ``interval_s`` seconds
    from a daemon thread until :meth:`stop`."""

    def __init__(
        self,
        role: str,
        interval_s: float,
        emit: Callable[[dict[str, float]], None],
        sampler: SystemSampler | None = None,
    ):
        self.role = role
        self.interval_s = float(interval_s)
        self.emit = emit
        self.sampler = sampler or SystemSampler()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitor-system", daemon=True)

    def prefixed(self) -> dict[str, float]:
        return {f"system/{self.role}/{k}": v for k, v in self.sampler.sample().items()}

    def _run(self) -> None:
        self.sampler.sample()  # prime the CPU counters: the first reading covers no interval
        while not self._stop.wait(self.interval_s):
            try:
                self.emit(self.prefixed())
            except Exception as err:  # noqa: BLE001 - metrics must never stop the actor
                log.warning("system metrics: sampling failed: %s", err)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self.sampler.close()
