"""GPU health: `NvmlHealth` (real, pynvml) and `FakeNvml` (tests) behind `GpuHealthProbe`."""

from lifeboat_dr.providers.health.base import (
    CRITICAL_XIDS,
    NO_DRIVER,
    GpuHealth,
    GpuHealthProbe,
    GpuStatus,
    XidEvent,
)

__all__ = ["CRITICAL_XIDS", "NO_DRIVER", "GpuHealth", "GpuHealthProbe", "GpuStatus", "XidEvent"]
