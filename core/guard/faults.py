"""What went wrong in a training step, and the exit code that says so.

Pure Python over exception types and messages (torch's classes are looked up by name, so
nothing here imports torch). The table is the contract between the guard, torchrun's
wrapper (`lifeboat_dr.standins.trainer.torchrun`) and whoever reads the job's exit code:

    code  kind      what the guard saw
    ----  --------  ---------------------------------------------------------------------
      75  fenced    (core/commit.py) a failover fenced this job out: not a fault
      80  nccl      a distributed/NCCL error: torch.distributed.DistBackendError,
                    DistNetworkError, DistStoreError, DistError
      81  cuda      a CUDA error: torch.AcceleratorError, torch.cuda.OutOfMemoryError, or
                    a RuntimeError whose message starts "CUDA error"
      82  timeout   a collective that timed out (a Dist* error or RuntimeError saying so)
      83  hang      the watchdog: a step ran past the bound and raised nothing

Whether an emergency checkpoint was written is not in the code (a rung of recovery reads
the store: the checkpoint's commit record says `emergency`); the event says both.
"""

from __future__ import annotations

from dataclasses import dataclass

EXIT_CODES = {"nccl": 80, "cuda": 81, "timeout": 82, "hang": 83}
KINDS = tuple(EXIT_CODES)

_DIST = ("DistBackendError", "DistNetworkError", "DistStoreError", "DistError")
_CUDA = ("AcceleratorError", "OutOfMemoryError", "CudaError")
_TIMEOUT_WORDS = ("timed out", "timeout", "deadline exceeded")


@dataclass(frozen=True)
class Fault:
    """One fault of a guarded job, as the event and the commit record name it."""

    kind: str  # one of KINDS
    rank: int  # the rank at fault (for a hang: the peer found stopped, else the rank that noticed)
    host: str
    step: int  # the step that was running (1-based: the step being computed)
    detail: str  # one line: the exception, or the watchdog's measure

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.kind]


def _names(error: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(error).__mro__}


def fault_kind(error: BaseException) -> str | None:
    """The kind of `error` (`nccl`, `cuda`, `timeout`), or None: not a fault the guard
    handles (a bug in the training script stays a crash with its traceback)."""
    names, message = _names(error), str(error).lower()
    timed_out = any(word in message for word in _TIMEOUT_WORDS)
    if names & set(_CUDA) or message.startswith("cuda error"):
        return "cuda"
    if names & set(_DIST):
        return "timeout" if timed_out else "nccl"
    if isinstance(error, RuntimeError) and timed_out and ("gloo" in message or "nccl" in message):
        return "timeout"
    if isinstance(error, RuntimeError) and message.startswith("nccl error"):
        return "nccl"
    return None


def poisons_device(error: BaseException) -> bool:
    """Whether `error` leaves the CUDA context unusable, so no device memory can be read
    back (an illegal address, an XID that froze the context): every CUDA error but an
    out-of-memory one."""
    return fault_kind(error) == "cuda" and "OutOfMemoryError" not in _names(error)


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]
