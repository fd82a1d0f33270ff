"""NVML GPU health: the one module that calls pynvml (nvidia-ml-py). See base.py.

Owns init/shutdown (always paired, even when a query fails) and maps every NVML error
onto a `GpuHealth` answer. `nvml=` accepts any object with pynvml's functions and
constants, which is how `lifeboat_dr.providers.health.fake.FakeNvml` drives this exact code.
"""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.health.base import (
    CRITICAL_XIDS,
    NO_DRIVER,
    GpuHealth,
    GpuStatus,
    XidEvent,
    summarize,
)

_MAX_XID_EVENTS = 256


def import_pynvml():
    try:
        import pynvml
    except ImportError as e:  # pragma: no cover - nvidia-ml-py is a core dependency
        raise ConfigError("GPU health needs nvidia-ml-py: pip install nvidia-ml-py") from e
    return pynvml


class _Lost(Exception):
    """A query said NVML_ERROR_GPU_IS_LOST: stop asking this GPU anything."""


class NvmlHealth:
    """GPU health from NVML on this host.

    `xid_wait_ms`: how long `check()` listens for XID events (0 drains what is already
    queued; None skips event registration). `expected_gpus`: fewer visible GPUs is a problem.
    """

    def __init__(
        self,
        *,
        nvml: Any = None,
        host: str | None = None,
        xid_wait_ms: int | None = 0,
        expected_gpus: int | None = None,
    ):
        self._nvml = nvml
        self.host = host or socket.gethostname()
        self.xid_wait_ms = xid_wait_ms
        self.expected_gpus = expected_gpus

    def check(self) -> GpuHealth:
        nv = self._nvml or import_pynvml()
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            code = getattr(e, "value", None)
            if code in (nv.NVML_ERROR_LIBRARY_NOT_FOUND, nv.NVML_ERROR_DRIVER_NOT_LOADED):
                return GpuHealth(self.host, "no_driver", NO_DRIVER)
            return GpuHealth(self.host, "unavailable", f"NVML init failed: {_describe(nv, e)}")
        try:
            driver = _text(_try(nv, nv.nvmlSystemGetDriverVersion))
            count = nv.nvmlDeviceGetCount()
            handles: dict[int, Any] = {}
            gpus = [self._gpu(nv, i, handles) for i in range(count)]
            xids = self._xids(nv, handles) if self.xid_wait_ms is not None else []
            return summarize(self.host, driver, gpus, xids, self.expected_gpus)
        except nv.NVMLError as e:
            return GpuHealth(self.host, "unavailable", f"NVML query failed: {_describe(nv, e)}")
        finally:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlShutdown()

    def _gpu(self, nv: Any, index: int, handles: dict[int, Any]) -> GpuStatus:
        notes: list[str] = []

        def ask(fn, *args):
            try:
                return fn(*args)
            except nv.NVMLError as e:
                if e.value == nv.NVML_ERROR_GPU_IS_LOST:
                    raise _Lost from e
                if e.value not in (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_INVALID_ARGUMENT):
                    notes.append(f"{fn.__name__}: {_describe(nv, e)}")
                return None

        try:
            h = ask(nv.nvmlDeviceGetHandleByIndex, index)
            if h is None:
                return GpuStatus(index, notes=tuple(notes))
            handles[index] = h
            uuid, name = _text(ask(nv.nvmlDeviceGetUUID, h)), _text(ask(nv.nvmlDeviceGetName, h))
            ecc = ask(
                nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
            )
            rows = ask(nv.nvmlDeviceGetRemappedRows, h)  # (corrected, uncorrected, pending, failed)
            pages = ask(
                nv.nvmlDeviceGetRetiredPages_v2, h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
            )
            pending = ask(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
            active, down = [], []
            for link in range(nv.NVML_NVLINK_MAX_LINKS):
                try:
                    state = nv.nvmlDeviceGetNvLinkState(h, link)
                except nv.NVMLError as e:
                    if e.value == nv.NVML_ERROR_GPU_IS_LOST:
                        raise _Lost from e
                    continue  # link not present on this GPU
                (active if state == nv.NVML_FEATURE_ENABLED else down).append(link)
        except _Lost:
            handles.pop(index, None)
            return GpuStatus(index, lost=True, notes=tuple(notes))
        return GpuStatus(
            index,
            uuid=uuid,
            name=name,
            ecc_uncorrectable=None if ecc is None else int(ecc),
            remap_pending=None if rows is None else bool(rows[2]),
            remap_failed=None if rows is None else bool(rows[3]),
            retired_pages=None if pages is None else len(pages),
            retire_pending=None if pending is None else pending == nv.NVML_FEATURE_ENABLED,
            nvlinks_active=tuple(active),
            # A GPU with no active link has no NVLink fabric to lose; one with some links
            # up and some down has lost part of its fabric.
            nvlinks_down=tuple(down) if active else (),
            notes=tuple(notes),
        )

    def _xids(self, nv: Any, handles: dict[int, Any]) -> list[XidEvent]:
        if not handles:
            return []
        events: list[XidEvent] = []
        event_set = nv.nvmlEventSetCreate()
        try:
            for h in handles.values():
                try:
                    nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, event_set)
                except nv.NVMLError as e:
                    if e.value != nv.NVML_ERROR_NOT_SUPPORTED:
                        raise
            deadline = time.monotonic() + (self.xid_wait_ms or 0) / 1000
            while len(events) < _MAX_XID_EVENTS:
                wait_ms = max(0, int((deadline - time.monotonic()) * 1000))
                try:
                    data = nv.nvmlEventSetWait_v2(event_set, wait_ms)
                except nv.NVMLError as e:
                    if e.value == nv.NVML_ERROR_TIMEOUT:
                        break
                    raise
                xid = int(data.eventData)
                try:
                    gpu = int(nv.nvmlDeviceGetIndex(data.device))
                except nv.NVMLError:
                    gpu = -1
                meaning = CRITICAL_XIDS.get(xid, "see the NVIDIA XID catalogue")
                events.append(XidEvent(gpu, xid, xid in CRITICAL_XIDS, meaning))
        finally:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlEventSetFree(event_set)
        return events


def _try(nv: Any, fn, *args):
    try:
        return fn(*args)
    except nv.NVMLError:
        return None


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _describe(nv: Any, e: Exception) -> str:
    return f"{e} (NVML error {getattr(e, 'value', '?')})"
