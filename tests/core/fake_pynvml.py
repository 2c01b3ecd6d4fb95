"""A stand-in for nvidia-ml-py's ``pynvml`` (NVML), which a CPU machine lacks: the one thing the
system-metrics tests mock (``monitor/test_system_metrics.py``, and the run page's GPU chart in
``tests/e2e/test_run_page_system_and_retention.py``); put it in ``sys.modules["pynvml"]``."""

from __future__ import annotations

import types

from rft_core.monitor.system import GB


class _NVMLError(Exception):
    pass


def fake_pynvml(util=(35, 80), used=(4 * GB, 30 * GB), total=80 * GB, fail_init=False):
    """A stand-in for nvidia-ml-py's ``pynvml`` on a host with len(util) GPUs."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = _NVMLError
    nvml.calls = []

    def init():
        if fail_init:
            raise _NVMLError("NVML Shared Library Not Found")

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: nvml.calls.append("shutdown")
    nvml.nvmlDeviceGetCount = lambda: len(util)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=util[h], memory=0)
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(
        used=used[h], total=total, free=total - used[h]
    )
    return nvml
