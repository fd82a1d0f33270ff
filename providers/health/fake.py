"""A stateful stand-in for the pynvml module, faithful enough to drive `NvmlHealth`.

It keeps pynvml's rules: every call but `nvmlInit` needs an initialized library
(reference-counted like the real one), errors are the real `pynvml.NVMLError(code)`
subclasses, XID events queue per event set and `nvmlEventSetWait_v2` raises
`NVMLError_Timeout` when none is waiting. Constants come from the real pynvml.

    nv = FakeNvml([FakeGpu(), FakeGpu()])
    nv.inject_xid(1, 79)                        # GPU 1 fell off the bus
    nv.fail("nvmlDeviceGetRemappedRows", pynvml.NVML_ERROR_NOT_SUPPORTED)
    NvmlHealth(nvml=nv).check()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from lifeboat_dr.providers.health.nvml import import_pynvml


@dataclass
class FakeGpu:
    """One GPU's state; change the fields to make it sick."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str | None = None
    ecc_uncorrectable: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # corrected, uncorrected, pending, failed
    retired_pages: list[int] = field(default_factory=list)
    retire_pending: bool = False
    nvlinks: list[bool] = field(default_factory=lambda: [True] * 18)  # True = active
    lost: bool = False


@dataclass(frozen=True)
class _Handle:
    index: int


class FakeNvml:
    """The subset of pynvml `NvmlHealth` uses, over in-memory GPUs."""

    def __init__(self, gpus: list[FakeGpu] | None = None, *, driver: str = "550.54.15"):
        self._pynvml = import_pynvml()
        self.NVMLError = self._pynvml.NVMLError
        self.gpus = list(gpus or [])
        for i, g in enumerate(self.gpus):
            g.uuid = g.uuid or f"GPU-fake-{i:04d}"
        self.driver = driver
        self.init_count = 0  # reference count: init/shutdown must pair up
        self.calls: list[str] = []
        self._faults: dict[tuple[str, int | None], int] = {}
        self._sets: dict[int, dict] = {}
        self._next_set = 1
        self._early: list[tuple[int, int]] = []

    # Constants (NVML_*, nvmlEventType*) are the real module's.
    def __getattr__(self, name: str):
        if name.startswith(("NVML_", "nvmlEventType")):
            return getattr(self._pynvml, name)
        raise AttributeError(name)

    # -- fault injection -------------------------------------------------------------
    def fail(self, function: str, code: int, gpu: int | None = None) -> None:
        """Make `function` raise `NVMLError(code)` (for one GPU, or for every call)."""
        self._faults[(function, gpu)] = code

    def clear(self, function: str, gpu: int | None = None) -> None:
        self._faults.pop((function, gpu), None)

    def inject_xid(self, gpu: int, xid: int) -> None:
        """The driver reports XID `xid` on `gpu`. Before any event set listens, the event is
        held and delivered at registration: a test means "this happens while the probe listens"."""
        listening = [s for s in self._sets.values() if gpu in s["devices"]]
        for s in listening:
            s["queue"].append(self._event(gpu, xid))
        if not listening:
            self._early.append((gpu, xid))

    def _event(self, gpu: int, xid: int) -> SimpleNamespace:
        return SimpleNamespace(
            device=_Handle(gpu),
            eventType=self._pynvml.nvmlEventTypeXidCriticalError,
            eventData=xid,
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )

    # -- the pynvml surface ----------------------------------------------------------
    def _enter(self, name: str, handle: _Handle | None = None) -> FakeGpu | None:
        self.calls.append(name)
        if name != "nvmlInit" and self.init_count == 0:
            raise self.NVMLError(self._pynvml.NVML_ERROR_UNINITIALIZED)
        for key in ((name, None), (name, handle.index if handle else None)):
            if key in self._faults:
                raise self.NVMLError(self._faults[key])
        if handle is None:
            return None
        if handle.index >= len(self.gpus):
            raise self.NVMLError(self._pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise self.NVMLError(self._pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex", _Handle(index))
        return _Handle(index)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetIndex")
        return handle.index

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._enter("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._enter("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter_type: int) -> int:
        gpu = self._enter("nvmlDeviceGetTotalEccErrors", handle)
        return gpu.ecc_uncorrectable if error_type == self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0

    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> tuple[int, int, int, int]:
        return self._enter("nvmlDeviceGetRemappedRows", handle).remapped_rows

    def nvmlDeviceGetRetiredPages_v2(self, handle: _Handle, cause: int) -> list[dict]:
        gpu = self._enter("nvmlDeviceGetRetiredPages_v2", handle)
        return [{"address": a, "timestamp": 0} for a in gpu.retired_pages]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: _Handle) -> int:
        gpu = self._enter("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        return self.NVML_FEATURE_ENABLED if gpu.retire_pending else self.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkState(self, handle: _Handle, link: int) -> int:
        gpu = self._enter("nvmlDeviceGetNvLinkState", handle)
        if link >= len(gpu.nvlinks):
            raise self.NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return self.NVML_FEATURE_ENABLED if gpu.nvlinks[link] else self.NVML_FEATURE_DISABLED

    def nvmlEventSetCreate(self) -> int:
        self._enter("nvmlEventSetCreate")
        handle, self._next_set = self._next_set, self._next_set + 1
        self._sets[handle] = {"devices": set(), "queue": []}
        return handle

    def nvmlDeviceRegisterEvents(self, handle: _Handle, event_types: int, event_set: int) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle)
        s = self._sets[event_set]
        s["devices"].add(handle.index)
        for early in [e for e in self._early if e[0] == handle.index]:
            self._early.remove(early)
            s["queue"].append(self._event(*early))

    def nvmlEventSetWait_v2(self, event_set: int, timeout_ms: int):
        self._enter("nvmlEventSetWait_v2")
        queue = self._sets[event_set]["queue"]
        if not queue:
            raise self.NVMLError(self._pynvml.NVML_ERROR_TIMEOUT)
        return queue.pop(0)

    def nvmlEventSetFree(self, event_set: int) -> None:
        self._enter("nvmlEventSetFree")
        del self._sets[event_set]
