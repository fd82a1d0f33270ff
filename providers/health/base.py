"""The GPU health interface: one call that says whether this host's GPUs can train.

`GpuHealthProbe.check()` returns a `GpuHealth` snapshot and never raises for a sick or
missing GPU: a host without an NVIDIA driver, a GPU that fell off the bus, an NVML error
are all *answers* (state `no_driver`, `unavailable`, `degraded`), because the watch flow
must keep running to report them. Only `providers/health/nvml.py` touches pynvml types.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol, runtime_checkable

NO_DRIVER = "no NVIDIA driver on this host"

# XIDs that mean "this GPU cannot be trusted to keep training" (NVIDIA XID catalogue).
# Others (13 graphics engine exception, 31 MMU fault, 43 app stopped) are usually the
# application's own fault and are recorded but do not fail the probe.
CRITICAL_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    64: "row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}

HealthState = Literal["ok", "degraded", "no_driver", "unavailable"]


@dataclass(frozen=True)
class XidEvent:
    """One XID the driver reported while we listened."""

    gpu: int  # NVML device index
    xid: int
    critical: bool  # in CRITICAL_XIDS
    meaning: str


@dataclass(frozen=True)
class GpuStatus:
    """What NVML says about one GPU. `None` means NVML cannot tell on this GPU (not supported)."""

    index: int
    uuid: str | None = None
    name: str | None = None
    lost: bool = False  # NVML_ERROR_GPU_IS_LOST: fallen off the bus, needs a reset
    ecc_uncorrectable: int | None = None  # volatile (since driver load) uncorrected ECC errors
    remap_pending: bool | None = None  # a row remap waits for a GPU reset
    remap_failed: bool | None = None  # the bank ran out of spare rows: replace the GPU
    retired_pages: int | None = None  # pages retired for double-bit ECC (pre-Ampere)
    retire_pending: bool | None = None  # a page retirement waits for a reboot
    nvlinks_active: tuple[int, ...] = ()
    nvlinks_down: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()  # queries that failed, for the evidence

    @property
    def problems(self) -> list[str]:
        """One line per reason this GPU should not keep training; empty when healthy."""
        p = f"GPU {self.index}"
        out = []
        if self.lost:
            out.append(f"{p}: lost (fallen off the bus)")
        if self.ecc_uncorrectable:
            out.append(f"{p}: {self.ecc_uncorrectable} uncorrectable ECC error(s)")
        if self.remap_failed:
            out.append(f"{p}: row remapping failed")
        if self.remap_pending:
            out.append(f"{p}: row remap pending (needs reset)")
        if self.retire_pending:
            out.append(f"{p}: page retirement pending (needs reboot)")
        if self.nvlinks_down:
            out.append(f"{p}: NVLink(s) {', '.join(map(str, self.nvlinks_down))} down")
        return out


@dataclass(frozen=True)
class GpuHealth:
    """A snapshot of every GPU on one host."""

    host: str
    state: HealthState
    message: str  # one line for the human: "2 problems on 8 GPUs", NO_DRIVER, ...
    driver_version: str | None = None
    gpus: tuple[GpuStatus, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()
    problems: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(
    host: str, driver_version: str | None, gpus: list[GpuStatus], xids: list[XidEvent], expected: int | None
) -> GpuHealth:
    """Fold per-GPU findings into one `GpuHealth` (shared by every backend)."""
    problems = [line for g in gpus for line in g.problems]
    problems += [f"GPU {x.gpu}: XID {x.xid} ({x.meaning})" for x in xids if x.critical]
    if expected is not None and len(gpus) < expected:
        problems.append(f"{len(gpus)} GPU(s) visible, {expected} expected")
    state: HealthState = "degraded" if problems else "ok"
    message = (
        f"{len(problems)} problem(s) on {len(gpus)} GPU(s)" if problems else f"{len(gpus)} GPU(s) healthy"
    )
    return GpuHealth(host, state, message, driver_version, tuple(gpus), tuple(xids), tuple(problems))


@runtime_checkable
class GpuHealthProbe(Protocol):
    """Checks this host's GPUs. Never raises for a GPU or driver problem: it reports it."""

    def check(self) -> GpuHealth:
        """Snapshot now; backends may listen for XID events for a bounded time first."""
        ...
