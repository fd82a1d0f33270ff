"""`TrainingGuard`: the step loop's fault handler (see `lifeboat_dr.core.guard` for the contract).

Per rank, inside `torch.distributed` (any backend; the guard's own coordination runs on a
gloo side group made at entry, so a broken NCCL communicator does not take it down):

- `step(n)` snapshots the RNG state, watches the step, and classifies what it raises
  (`faults.fault_kind`); anything else propagates untouched.
- An optimizer step pre/post hook tells where in the step the fault came: before the
  update (the model and optimizer are still those of step n-1; the RNG snapshot restores
  the rest), after it (those of step n), or during it (torn: no checkpoint).
- The ranks agree over the side group (one all_gather, bounded by `coordinate_timeout_s`):
  only when every rank answers with the same consistent step is the emergency checkpoint
  saved (the script's `save`, on the side group) and committed with its record; a rank that
  does not answer, a CUDA error that poisoned the device, a torn update: none is written.
- The event (`EventSink`) names the fault, and the runbook when Lifeboat launched the job
  (`$LIFEBOAT_RUNBOOK_NAME` / `$LIFEBOAT_RUNBOOK`, labels `lifeboat.runbook` and
  `lifeboat.runbook.path` on its resource: the runbook's `recover` automation matches the
  name; a job without them still reports, and nothing recovers it); the process exits with the fault's code at once
  (`os._exit` after flushing stdout and stderr: a broken communicator's teardown can hang,
  which is why NCCL's own watchdog kills the process too, and an interpreter holding torch
  took seconds to finalise on two loaded cores; the loss log and the checkpoint are on disk).

The watchdog's hang path (a thread: the step is stuck in C++) dumps this rank's stacks
(faulthandler, all threads), asks the live peers on this host for theirs (SIGUSR1), names a
stopped peer as the rank at fault, kills it (it cannot run its own guard; torchrun would
wait 30 s on it), emits the event and `os._exit(83)`: no emergency checkpoint, since a
collective DCP save needs the rank that is stuck.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from lifeboat_dr.core.guard.faults import EXIT_CODES, Fault, fault_kind, one_line, poisons_device
from lifeboat_dr.core.guard.watchdog import HangRule, StepWatchdog
from lifeboat_dr.providers.orchestrator.events import EventSink, events_from_env

EVENT = "lifeboat.training.fault"
RUNBOOK_NAME_ENV, RUNBOOK_ENV = "LIFEBOAT_RUNBOOK_NAME", "LIFEBOAT_RUNBOOK"  # set by Lifeboat's launches
EVENT_NAMESPACE = uuid.UUID("6c1f0f53-9b0e-4f2a-8a39-1f2b3c4d5e6f")
BEFORE, DURING, AFTER = 0, 1, 2  # where in the step the fault came (optimizer hooks)

EmergencySave = Callable[[int, dict, Any], None]  # (step, commit record, process group)


def exit_now(code: int) -> NoReturn:
    """End this rank now with `code`, its output flushed (see the module docstring)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class TrainingGuard:
    """Context manager around a rank's step loop::

        guard = TrainingGuard(save=emergency_save, optimizer=optimizer, rule=HangRule(multiple=10))
        with guard:
            while step < steps:
                with guard.step(step + 1):
                    loss = train_step(...)
                step += 1
                if step % every == 0:
                    with guard.saving(step):
                        save_and_commit(step)
                    guard.committed(step)

    `save(step, record, group)` writes the checkpoint of `step` collectively over `group`
    and commits it with `record` in its commit record (core/commit.py `commit_checkpoint`).
    `exit(code)` ends the rank after a fault (default `exit_now`; tests pass `sys.exit`)."""

    def __init__(
        self,
        *,
        save: EmergencySave,
        optimizer: Any = None,
        rule: HangRule | None = None,
        save_rule: HangRule | None = None,
        events: EventSink | None = None,
        job: str | None = None,
        coordinate_timeout_s: float = 30.0,
        poll_s: float = 0.1,
        exit: Callable[[int], NoReturn] = exit_now,
    ):
        self.save, self.optimizer = save, optimizer
        self.rule = rule or HangRule()
        self.save_rule = save_rule or HangRule(  # saves against saves: they are no steps
            multiple=self.rule.multiple, floor_s=self.rule.floor_s, first_s=self.rule.first_s, warmup=2
        )
        self._span = "step"  # what the watchdog watches now
        self.events = events if events is not None else events_from_env()
        self.job = job or os.environ.get("TORCHELASTIC_RUN_ID", "job")
        self.runbook = (os.environ.get(RUNBOOK_NAME_ENV, ""), os.environ.get(RUNBOOK_ENV, ""))
        self.coordinate_timeout_s, self.poll_s, self.exit = coordinate_timeout_s, poll_s, exit
        self.host = socket.gethostname()
        self.last_committed: int | None = None
        self.faults: list[Fault] = []
        self._phase = BEFORE
        self._rng: tuple[Any, Any] | None = None
        self._hooks: list[Any] = []
        self._peers: list[tuple[int, str]] = []
        self.watchdog = StepWatchdog(self.rule, self._on_hang, poll_s=poll_s)

    # -- setup -------------------------------------------------------------------------------

    def __enter__(self) -> TrainingGuard:
        import torch.distributed as dist

        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=self.coordinate_timeout_s))
        peers: list[Any] = [None] * self.world
        dist.all_gather_object(peers, (os.getpid(), self.host), group=self.group)
        self._peers = [tuple(p) for p in peers]
        # a peer's watchdog asks for our stacks; a handler already there (SLURM's USR1 warning) still runs
        chain = signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, signal.SIG_IGN, None)
        faulthandler.register(signal.SIGUSR1, all_threads=True, chain=chain)
        if self.optimizer is not None:
            self._hooks = [
                self.optimizer.register_step_pre_hook(lambda *_: self._set_phase(DURING)),
                self.optimizer.register_step_post_hook(lambda *_: self._set_phase(AFTER)),
            ]
        self.watchdog.start()
        return self

    def __exit__(self, *exc) -> None:
        self.watchdog.stop()
        for hook in self._hooks:
            hook.remove()
        faulthandler.unregister(signal.SIGUSR1)

    def _set_phase(self, phase: int) -> None:
        self._phase = phase

    def committed(self, step: int) -> None:
        """The script committed the checkpoint of `step` (an emergency one there is not needed)."""
        self.last_committed = step

    # -- the step ----------------------------------------------------------------------------

    @contextmanager
    def step(self, n: int) -> Iterator[None]:
        import torch

        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self._rng, self._phase = (torch.get_rng_state(), cuda), BEFORE
        self._span = "step"
        self.watchdog.begin(n)
        try:
            yield
        except Exception as error:
            self.watchdog.pause()
            kind = fault_kind(error)
            if kind is None:
                raise  # a bug in the script: its own traceback
            self._on_fault(kind, error, n)
        self.watchdog.end()

    @contextmanager
    def saving(self, n: int) -> Iterator[None]:
        """Watch the periodic checkpoint save of step `n` (collective: a rank stopped there
        stalls the others in its barrier as in a step's all-reduce) against the recent saves'
        median (`save_rule`). What it raises (a fenced commit) passes through, unwatched."""
        self._span = "checkpoint save of step"
        self.watchdog.begin(n, self.save_rule)
        try:
            yield
        except BaseException:
            self.watchdog.pause()
            raise
        self.watchdog.end()

    def _local_candidate(self, kind: str, error: BaseException, n: int) -> tuple[int, str]:
        """The step whose state this rank still holds whole (-1: none), and why."""
        import torch

        if poisons_device(error) and torch.cuda.is_initialized():
            return -1, "a CUDA error left the device context unusable: its memory cannot be read back"
        if self._phase == DURING:
            return -1, f"the fault came inside optimizer.step() of step {n}: the update is torn"
        if self._phase == AFTER:
            return n, f"the fault came after step {n}'s update"
        torch.set_rng_state(self._rng[0])
        if self._rng[1] is not None:
            torch.cuda.set_rng_state_all(self._rng[1])
        return n - 1, f"the fault came before step {n}'s update (RNG restored to the step's start)"

    def _agree(self, candidate: int) -> list[int] | None:
        """Every rank's candidate, over the side group; None when a rank did not answer."""
        import torch
        import torch.distributed as dist

        mine = torch.tensor([candidate], dtype=torch.int64)
        every = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
        try:
            dist.all_gather(every, mine, group=self.group)
        except Exception:  # a rank gone or stuck: no agreement, whatever the error's type
            return None
        return [int(t.item()) for t in every]

    def _on_fault(self, kind: str, error: BaseException, n: int) -> None:
        with _sigterm_deferred():  # a peer's exit makes torchrun SIGTERM us: report first
            code = self._handle(kind, error, n)
        self.exit(code)

    def _handle(self, kind: str, error: BaseException, n: int) -> int:
        """Agree, save where consistent, report; the fault's exit code."""
        caught = time.monotonic()
        candidate, why = self._local_candidate(kind, error, n)
        answers = self._agree(candidate)
        emergency: int | None = None
        if answers is None:
            why = (
                f"a rank did not answer (gone, or stuck past {self.coordinate_timeout_s:g} s): no checkpoint"
            )
        elif len(set(answers)) != 1 or answers[0] < 0:
            why = f"the ranks hold steps {answers}: no consistent state, no checkpoint ({why})"
        elif answers[0] == self.last_committed or answers[0] == 0:
            why = f"step {answers[0]} is already committed (or the start): nothing to write"
        else:
            record = {"emergency": {"fault": kind, "step": n, "consistent": True, "why": why}}
            try:
                self.save(answers[0], record, self.group)
                emergency, why = answers[0], f"emergency checkpoint of step {answers[0]}: {why}"
            except Exception as e:  # noqa: BLE001 - the save failing is reported, the fault stands
                why = f"the emergency save failed ({one_line(e)}): no checkpoint"
        fault = Fault(kind, self.rank, self.host, n, one_line(error))
        reporter = answers is None or self.rank == 0  # agreed: rank 0 speaks for the job
        handled_s = round(time.monotonic() - caught, 3)  # agreement + emergency save + commit
        self._finish(fault, emergency, why, reporter, ranks=self._ranks(answers), handled_s=handled_s)
        return fault.exit_code

    def _ranks(self, answers: list[int] | None) -> list[int]:
        return list(range(self.world)) if answers is not None else [self.rank]

    # -- the hang ----------------------------------------------------------------------------

    def _on_hang(self, n: int, elapsed: float, bound: float) -> None:
        """The watchdog thread: the step has run `elapsed` s, past `bound` s."""
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        at_fault, notes = self.rank, []
        for rank, (pid, host) in enumerate(self._peers):
            if rank == self.rank or host != self.host:
                continue
            if _stopped(pid):
                at_fault = rank
                notes.append(f"rank {rank} (pid {pid}) is stopped: no stacks; killed")
                _signal(pid, signal.SIGKILL)
            else:
                _signal(pid, signal.SIGUSR1)  # its stacks, on its stderr
        rule = self.rule if self._span == "step" else self.save_rule
        median = rule.median()
        detail = (
            f"{self._span} {n} ran {elapsed:.2f} s, past the bound {bound:.2f} s "
            f"({rule.multiple:g} x median {median:.3f} s, floor {rule.floor_s:g} s)"
            if rule.warmed()
            else f"{self._span} {n} ran {elapsed:.2f} s, past the first-{self._span.split()[0]}s bound {bound:.2f} s"
        )
        fault = Fault("hang", at_fault, self.host, n, "; ".join([detail, *notes]))
        why = "a hang: a rank is stuck in a collective, DCP's collective save needs it: no checkpoint"
        self._finish(fault, None, why, True, ranks=[self.rank], elapsed=elapsed, bound=bound, span=self._span)
        exit_now(fault.exit_code)  # from the watchdog thread: only a hard exit ends the process

    # -- the report --------------------------------------------------------------------------

    def _finish(self, fault: Fault, emergency: int | None, why: str, reporter: bool, **extra) -> None:
        self.faults.append(fault)
        payload = {
            "kind": fault.kind,
            "rank": fault.rank,
            "host": fault.host,
            "step": fault.step,
            "detail": fault.detail,
            "exit_code": fault.exit_code,
            "emergency_checkpoint": emergency,
            "last_committed": self.last_committed,
            "checkpoint_note": why,
            "reported_by": self.rank,
            **extra,
        }
        if reporter:
            print(
                f"guard: rank {self.rank}: {fault.kind} at step {fault.step} (rank {fault.rank}, "
                f"{fault.host}): {fault.detail}; {why}; exiting {fault.exit_code}",
                file=sys.stderr,
                flush=True,
            )
            self._emit(fault, payload)

    def _emit(self, fault: Fault, payload: dict) -> None:
        resource = fault_resource(self.job, fault, *self.runbook)
        event_id = str(uuid.uuid5(EVENT_NAMESPACE, f"{self.job}/{fault.kind}/{fault.rank}/{fault.step}"))
        if self.events is None:
            print(
                json.dumps({"event": EVENT, "id": event_id, "payload": payload}), file=sys.stderr, flush=True
            )
            return
        try:
            self.events.emit(EVENT, resource, payload, id=event_id)
        except Exception as e:  # noqa: BLE001 - the job is ending: the event is best effort, said so
            print(f"guard: the fault event was not sent ({one_line(e)})", file=sys.stderr, flush=True)


def fault_resource(job: str, fault: Fault, runbook: str = "", path: str = "") -> dict[str, str]:
    """The fault event's resource: the job, the fault, and the runbook's name and file when
    Lifeboat launched the job (none: nothing recovers it automatically)."""
    resource = {
        "prefect.resource.id": f"lifeboat.job.{job}",
        "prefect.resource.name": job,
        "lifeboat.fault": fault.kind,
        "lifeboat.rank": str(fault.rank),
        "lifeboat.host": fault.host,
    }
    resource |= {"lifeboat.runbook": runbook} if runbook else {}
    return resource | ({"lifeboat.runbook.path": path} if path else {})


@contextmanager
def _sigterm_deferred() -> Iterator[None]:
    """SIGTERM ignored while a faulted rank agrees, saves and reports (bounded by the
    coordination timeout; torchrun waits 30 s before its SIGKILL): without it, a peer that
    exits first (its watchdog's 83) has torchrun stop this rank before it names the fault, and
    the job's exit says "hang" for what was rank 1's NCCL error. Main thread only."""
    try:
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to defer
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stopped(pid: int) -> bool:
    """Whether process `pid` on this host is stopped (SIGSTOP, a debugger): state T or t."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("T", "t")


def _signal(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


__all__ = ["EVENT", "EXIT_CODES", "TrainingGuard", "fault_resource"]
