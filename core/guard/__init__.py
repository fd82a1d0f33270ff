"""The training guard: what a training script imports so a CUDA error, an NCCL error or a
silent hang ends in the smallest loss of work, a code that says why, and an event naming it.

    from lifeboat_dr.core.guard import HangRule, TrainingGuard

Exit codes (`faults.py`): 80 nccl, 81 cuda, 82 timeout, 83 hang (75 stays "fenced out").

Which faults leave a checkpoint (`loop.py`):

    fault                          emergency checkpoint
    -----------------------------  ----------------------------------------------------------
    nccl / timeout / cuda, raised  yes, when every rank answers over the gloo side group with
      before optimizer.step()      the same step: the state of step n-1 (RNG restored)
    the same, after the update     yes: the state of step n
    the same, inside the update    no: the update is torn
    cuda, device initialised       no (but out-of-memory): the context is poisoned
    a rank that does not answer    no: nothing proves the ranks hold one step
    hang (the watchdog)            no: DCP's collective save needs the stuck rank
    already committed              nothing to write: the last periodic checkpoint is that step

An emergency checkpoint is committed through the guarded commit like any other, its commit
record carrying `{"emergency": {"fault", "step", "consistent": true, "why"}}`; certification
refuses any checkpoint whose record says `"consistent": false` (`core/certify.py`).
"""

from lifeboat_dr.core.guard.faults import EXIT_CODES, Fault, fault_kind
from lifeboat_dr.core.guard.loop import EVENT, TrainingGuard
from lifeboat_dr.core.guard.watchdog import HangRule, StepWatchdog

__all__ = ["EVENT", "EXIT_CODES", "Fault", "HangRule", "StepWatchdog", "TrainingGuard", "fault_kind"]
