"""The RTO/RPO ledger: when each failover phase happened, and how it measured up.

One `LedgerEntry` per failover run (or drill): milestone timestamps, the step start times
the timeline needs, failures, and the targets it is judged against. RTO runs from the
outage start to the first healthy step on the secondary (serving: to all traffic on the
standby, `traffic_switched`); RPO from the resumed checkpoint's
write time to the outage start. Either more than 20% over its target flags a root-cause
analysis. `RtoLedger` records an entry as the flow goes; `LedgerFile` / `LedgerStore`
keep entries durably as JSON lines (the last line per run wins). The entry is also the run's
record for a re-run under the same run id: the steps it holds done (`done`) and the checkpoint
it chose (`checkpoint`, `checkpoint_step`), read back by `lifeboat_dr.core.failover.rerun`.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, Field, model_validator

from lifeboat_dr.core.failover.graph import MILESTONES
from lifeboat_dr.core.serving.steps import SERVING_ONLY, SERVING_RENAMED, rto_end, steps_for
from lifeboat_dr.kernel.durations import format_duration
from lifeboat_dr.kernel.errors import ConfigError, LifeboatError, NotFound, WriteFailed

# Milestones, in the order a failover normally reaches them (from the step graphs).
PHASES = MILESTONES + SERVING_ONLY

RCA_THRESHOLD = 1.2  # more than 20% over a target calls for a root-cause analysis
CLOCKS_DISAGREE = timedelta(seconds=2)  # a write "after" the outage by more: clocks that disagree

DEFAULT_LEDGER = Path(".lifeboat/ledger.jsonl")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Failure(BaseModel):
    phase: str = Field(description="The milestone the run was heading for when it failed.")
    at: datetime
    error: str = Field(description="One line: the error type and message.")


class ClientWindow(BaseModel):
    """What an independent synthetic client saw during a serving failover."""

    first_error: datetime | None = Field(None, description="Its first failed request after the outage began.")
    first_good_after: datetime | None = Field(
        None, description="Its first good request after traffic moved to the standby."
    )
    requests: int = Field(0, description="Requests it sent.")
    errors: int = Field(0, description="Of those, how many failed (HTTP error, refused, timed out).")
    measured_by: str = Field("", description="Which client, e.g. `python load loop, 50 req/s, pid 4242`.")

    @property
    def window(self) -> timedelta | None:
        """First failed request -> first good one after the switch (zero when none failed)."""
        if self.first_error is None:
            return timedelta(0) if self.requests else None
        if self.first_good_after is None:
            return None
        return self.first_good_after - self.first_error


class ParityRecord(BaseModel):
    """The loss-parity proof of the checkpoint the run resumed from, as it came out."""

    outcome: str = Field(
        description="passed, mismatch or not provable (only a mismatch is evidence against it)."
    )
    compared: int = Field(0, description="Steps compared.")
    asked: int = Field(0, description="Steps asked (`verify.parity_steps`): coverage is compared of asked.")
    checkpoint_step: int | None = Field(None, description="The step the job resumed from.")
    replayed_from: int | None = Field(
        None, description="The older checkpoint replayed beside the job for the proof (None: its own steps)."
    )
    detail: str = ""

    @property
    def coverage(self) -> float:
        return self.compared / self.asked if self.asked else 0.0

    def line(self) -> str:
        """One line for the report: "passed by a replay of step 30 (5 of 5 compared): …"."""
        how = f" by a replay of step {self.replayed_from}" if self.replayed_from is not None else ""
        return f"{self.outcome}{how} ({self.compared} of {self.asked} compared): {self.detail}"


class LedgerEntry(BaseModel):
    """One failover (or drill) as measured."""

    runbook: str
    run_id: str
    table: str = Field("training", description="Which step table: training (the failover graph) or serving.")
    drill: bool = Field(False, description="A rehearsal, not a real outage.")
    kind: str = Field(
        "failover",
        description="failover, or failback (back to the recovered primary; its outage_start "
        "milestone is when it was asked for, and RPO runs to the fence). A drill of either is `drill`.",
    )
    rto_target: timedelta
    rpo_target: timedelta
    phases: dict[str, datetime] = Field(default_factory=dict, description="Milestone -> when reached.")
    began: dict[str, datetime] = Field(
        default_factory=dict, description="Milestone -> when the step that reaches it started."
    )
    checkpoint: str | None = Field(None, description="URI of the checkpoint the secondary resumed from.")
    checkpoint_written_at: datetime | None = Field(None, description="Write time of that checkpoint.")
    checkpoint_step: int | None = Field(
        None, description="Its step: the checkpoint a re-run of this run resumes from, never chosen anew."
    )
    done: list[str] = Field(
        default_factory=list,
        description="Steps whose results this entry holds, in the order they ended (a rollback takes "
        "resume and prove out again): a re-run under the same run id finds them done.",
    )
    attempt: int = Field(1, description="Resumes so far: 2 after a rollback to an older checkpoint.")
    failures: list[Failure] = Field(default_factory=list)
    parity: ParityRecord | None = Field(None, description="The last loss-parity proof of this run.")
    outcome: str = Field("in-progress", description="in-progress, completed, failed or aborted.")
    notes: dict[str, str] = Field(default_factory=dict, description="Who approved, which plan, etc.")
    client: ClientWindow | None = Field(
        None, description="Serving: the error window a synthetic client saw (drills, the demo)."
    )
    revision: int = Field(
        0, description="Snapshots of this entry saved so far: of two copies (file, chain), the newer."
    )

    @property
    def label(self) -> str:
        """What ran, as people say it: "failover", "failback drill", "serving failover"."""
        what = f"serving {self.kind}" if self.table == "serving" else self.kind
        return f"{what} drill" if self.drill else what

    @model_validator(mode="before")
    @classmethod
    def _drill_was_a_kind(cls, data):
        """Entries written when a drill's `kind` was "drill" read as the failover they rehearsed."""
        if isinstance(data, dict) and data.get("kind") == "drill":
            data = {**data, "kind": "failover", "drill": True}
        return data

    @model_validator(mode="before")
    @classmethod
    def _renamed_milestones(cls, data):
        """A serving entry written before its milestones had their own names reads as if
        written now (`first_step` was its `traffic_switched`)."""
        if not isinstance(data, dict) or data.get("table") != "serving":
            return data
        old = SERVING_RENAMED
        data = dict(data)
        for field in ("phases", "began"):
            if isinstance(data.get(field), dict):
                data[field] = {old.get(m, m): at for m, at in data[field].items()}
        if isinstance(data.get("failures"), list):
            data["failures"] = [
                {**f, "phase": old.get(f.get("phase"), f.get("phase"))} if isinstance(f, dict) else f
                for f in data["failures"]
            ]
        return data

    @property
    def rto(self) -> timedelta | None:
        """Outage start to the first healthy step on the secondary (serving: to all traffic
        on the standby)."""
        start, end = self.phases.get("outage_start"), self.phases.get(rto_end(self.table))
        return end - start if start and end else None

    @property
    def rpo(self) -> timedelta | None:
        """Work lost: outage start minus the resumed checkpoint's write time. A failback's
        job stops at its fence, not at the request: the fence minus that write time. None
        when unknown, and when the checkpoint looks written more than `CLOCKS_DISAGREE` after
        the outage: the two times come from clocks that disagree (one stepped mid-run), and
        0 would hide the work lost (`rca_reasons` says so)."""
        lost = self._rpo_read()
        if lost is None or lost < -CLOCKS_DISAGREE:
            return None
        return max(timedelta(0), lost)

    def _rpo_read(self) -> timedelta | None:
        start = self.phases.get("fenced" if self.kind == "failback" else "outage_start")
        if start is None or self.checkpoint_written_at is None:
            return None
        return start - self.checkpoint_written_at

    @property
    def rto_ratio(self) -> float | None:
        return _ratio(self.rto, self.rto_target)

    @property
    def rpo_ratio(self) -> float | None:
        return _ratio(self.rpo, self.rpo_target)

    @property
    def rca_reasons(self) -> list[str]:
        """Why this run needs a root-cause analysis (empty: it does not)."""
        reasons = []
        for name, value, target, ratio in (
            ("RTO", self.rto, self.rto_target, self.rto_ratio),
            ("RPO", self.rpo, self.rpo_target, self.rpo_ratio),
        ):
            if ratio is not None and ratio > RCA_THRESHOLD:
                reasons.append(
                    f"{name} {format_duration(value)} is {ratio - 1:.0%} over its target {format_duration(target)}"
                )
        window = self.client.window if self.client else None
        ratio = _ratio(window, self.rto_target)
        if ratio is not None and ratio > RCA_THRESHOLD:
            reasons.append(
                f"client-visible error window {format_duration(window)} is {ratio - 1:.0%} over the RTO target {format_duration(self.rto_target)}"
            )
        lost = self._rpo_read()
        if lost is not None and lost < -CLOCKS_DISAGREE:
            reasons.append(
                f"RPO unknown: the checkpoint looks written {format_duration(-lost)} after the "
                f"{'fence' if self.kind == 'failback' else 'outage'}: their clocks disagree (one stepped?)"
            )
        reasons += [f"failed at {f.phase}: {f.error}" for f in self.failures]
        return reasons

    @property
    def needs_rca(self) -> bool:
        return bool(self.rca_reasons)

    @property
    def start_up(self) -> tuple[datetime, datetime] | None:
        """(detection, the confirm step's start): the run created, its runbook loaded and its
        providers built, before any step ran. A phase of its own: it is no step's, so the
        steps' critical path alone does not show it."""
        detected, confirm = self.phases.get("detected"), self.began.get("confirmed")
        return (detected, confirm) if detected and confirm and confirm > detected else None

    def span(self, end_phase: str) -> tuple[datetime, datetime] | None:
        """(start, end) of the step that reaches `end_phase`, for the timeline."""
        step = next((s for s in steps_for(self.table) if s.milestone == end_phase), None)
        if step is None:
            return None
        stop = self.phases.get(end_phase)
        start = self.began.get(end_phase) or self.start_of(step)
        return (start, stop) if start and stop else None

    def start_of(self, step) -> datetime | None:
        """When a step began by default: its own start milestone, else the latest end of the
        steps it waits for (the graph's own order; early provisioning's variant where it ran)."""
        by_name = {s.name: s for s in steps_for(self.table)}
        if step.starts_at:
            return self.phases.get(step.starts_at)
        ends = [self.phases.get(by_name[d].milestone) for d in step.after if d in by_name]
        ends = [e for e in ends if e is not None]
        return max(ends, default=None)


def _ratio(value: timedelta | None, target: timedelta) -> float | None:
    if value is None:
        return None
    if target <= timedelta(0):
        return float("inf") if value > timedelta(0) else 1.0
    return value / target


class RtoLedger:
    """Records one run's entry as the flow goes; `sink.append(entry)` after each change, or
    once at the end of a `batch()` (one durable write per step instead of one per field).

    Inside `writing_behind()` each save is a snapshot handed to one writer thread and the
    caller goes on (the failover's walker notices the next step ending, and the approval gate
    returns, while an fsync or a chain store write is under way). Writes keep their order
    and land soon after; a failed one raises at the next save or at `flush()`; `finish()`
    returns once everything has landed.

    `prior`: the entry an earlier attempt of this run left (a re-run: `build_ledger(reopen=True)`): the
    recording goes on in it, first times kept, and `prior` stays as it was read."""

    def __init__(
        self,
        runbook: str,
        run_id: str,
        *,
        rto_target: timedelta,
        rpo_target: timedelta,
        drill: bool = False,
        kind: str | None = None,
        sink: LedgerFile | LedgerStore | None = None,
        clock: Callable[[], datetime] = _utcnow,
        table: str = "training",
        prior: LedgerEntry | None = None,
    ):
        self.prior = prior
        if prior is not None:
            self.entry = prior.model_copy(deep=True, update={"outcome": "in-progress"})
        else:
            self.entry = LedgerEntry(
                runbook=runbook,
                run_id=run_id,
                drill=drill,
                kind=kind or "failover",
                table=table,
                rto_target=rto_target,
                rpo_target=rpo_target,
            )
        self.sink, self.clock = sink, clock
        self._batching = 0
        self._dirty = False
        self._writing_behind = 0
        self._writer: ThreadPoolExecutor | None = None  # made by the first save written behind
        self._handing = threading.RLock()  # the approval timer's thread saves too; a step flushes
        self._behind: list[Future] = []  # writes not yet known to have landed

    @contextmanager
    def batch(self):
        """Changes inside the block are saved once, when it ends (even on an error)."""
        self._batching += 1
        try:
            yield self
        finally:
            self._batching -= 1
            if not self._batching and self._dirty:
                self._save()

    @contextmanager
    def writing_behind(self):
        """Saves inside the block are written by the writer thread (see the class); at its
        end they are flushed (raising a failed write's error)."""
        self._writing_behind += 1
        try:
            yield self
        finally:
            self._writing_behind -= 1
        self.flush()

    def flush(self) -> None:
        """Wait until every save so far has landed; raise the first failed one's error
        (`WriteFailed`), once. Any thread may wait (the failover's fence step does)."""
        with self._handing:
            pending = list(self._behind)
        try:
            for write in pending:
                write.result()
        finally:
            with self._handing:
                self._behind = [w for w in self._behind if w not in pending]

    def begin(self, phase: str, at: datetime | None = None) -> None:
        """The step that will reach `phase` starts now (for steps that run concurrently)."""
        self._check(phase)
        self.entry.began.setdefault(phase, at or self.clock())
        self._save()

    def mark(self, phase: str, at: datetime | None = None, *, again: bool = False) -> datetime:
        """`phase` reached now (or at `at`). Re-marking keeps the first time (idempotent
        re-runs) unless `again`: a rollback reaches the phase anew, and RTO counts to that."""
        self._check(phase)
        if again:
            self.entry.phases[phase] = at or self.clock()
        when = self.entry.phases.setdefault(phase, at or self.clock())
        self._save()
        return when

    def checkpoint(self, uri: str, written_at: datetime, step: int | None = None) -> None:
        self.entry.checkpoint, self.entry.checkpoint_written_at = uri, written_at
        self.entry.checkpoint_step = step
        self._save()

    def step_done(self, step: str) -> None:
        """`step`'s result is in this entry: a re-run of the run finds it done."""
        if step not in self.entry.done:
            self.entry.done.append(step)
        self._save()

    def again(self, attempt: int, *steps: str) -> None:
        """`steps` run again (a rollback resumes anew): their results are no longer this
        entry's; `attempt` counts the resumes."""
        self.entry.done = [s for s in self.entry.done if s not in steps]
        self.entry.attempt = attempt
        self._save()

    def parity(self, record: ParityRecord) -> None:
        self.entry.parity = record
        self._save()

    def client_window(self, window: ClientWindow) -> None:
        self.entry.client = window
        self._save()

    def note(self, key: str, value: str) -> None:
        self.entry.notes[key] = value
        self._save()

    def fail(self, phase: str, error: BaseException | str, outcome: str = "failed") -> None:
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self.entry.failures.append(Failure(phase=phase, at=self.clock(), error=text.splitlines()[0]))
        self.entry.outcome = outcome
        self._save()

    def finish(self, outcome: str = "completed") -> LedgerEntry:
        self.entry.outcome = outcome
        self._save()
        self.flush()
        if self._writer is not None:
            self._writer.shutdown()
            self._writer = None
        return self.entry

    @staticmethod
    def _check(phase: str) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown ledger phase {phase!r}; phases are {', '.join(PHASES)}")

    def _save(self) -> None:
        if self._batching:
            self._dirty = True
        elif self.sink is not None and self._writing_behind:
            self.entry.revision += 1
            self._save_behind()
        elif self.sink is not None:
            self._dirty = False
            self.flush()
            self.entry.revision += 1
            self.sink.append(self.entry)

    def _save_behind(self) -> None:
        self._dirty = False
        with self._handing:
            if any(w.done() and w.exception() for w in self._behind):
                self.flush()  # raises the failed write's error now
            self._behind = [w for w in self._behind if not w.done()]
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="ledger-writer")
            snapshot = self.entry.model_copy(deep=True)
            self._behind.append(self._writer.submit(self.sink.append, snapshot))


def latest_per_run(entries: Iterable[LedgerEntry]) -> list[LedgerEntry]:
    """The last snapshot of each run, oldest run first."""
    last: dict[str, LedgerEntry] = {}
    for e in entries:
        last.pop(e.run_id, None)
        last[e.run_id] = e
    return sorted(
        last.values(), key=lambda e: e.phases.get("outage_start") or datetime.max.replace(tzinfo=UTC)
    )


class LedgerFile:
    """JSON lines on local disk: append-only, one line per snapshot, fsynced. Without a path,
    `LIFEBOAT_LEDGER` or .lifeboat/ledger.jsonl: where the flow writes, report and retention read."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path or os.environ.get("LIFEBOAT_LEDGER") or DEFAULT_LEDGER)

    def append(self, entry: LedgerEntry) -> None:
        """Append one snapshot; raises `WriteFailed` naming the path (full disk, no access)."""
        line = entry.model_dump_json().encode() + b"\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a+b") as f:
                fcntl.flock(f, fcntl.LOCK_EX)  # several flows may share one ledger
                if f.seek(0, os.SEEK_END):  # a writer killed mid-line left it torn: end it first
                    f.seek(-1, os.SEEK_END)
                    if f.read(1) != b"\n":
                        line = b"\n" + line
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise WriteFailed(f"cannot write the RTO ledger {self.path}: {e.strerror or e}") from None

    def ensure_writable(self) -> None:
        """Open the ledger for appending now, before anything acts: `WriteFailed` otherwise."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a"):
                pass
        except OSError as e:
            raise WriteFailed(f"cannot write the RTO ledger {self.path}: {e.strerror or e}") from None

    def read(self, runbook: str | None = None) -> list[LedgerEntry]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        return latest_per_run(_parse(lines, str(self.path), runbook))

    def entry(self, runbook: str, run_id: str) -> LedgerEntry | None:
        """The last snapshot of run `run_id`, read back by its re-run; None when there is none.
        A line a crash tore mid-write is no snapshot: the one before it stands."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        return _last_of(text.splitlines(), runbook, run_id)


class LedgerStore:
    """Entries in a checkpoint store, one object per run (object stores cannot append)."""

    def __init__(self, store, prefix: str = "_lifeboat/ledger"):
        self.store, self.prefix = store, prefix.rstrip("/")

    def append(self, entry: LedgerEntry) -> None:
        key = f"{self.prefix}/{entry.runbook}/{entry.run_id}.json"
        try:
            self.store.put(key, entry.model_dump_json().encode() + b"\n")
        except LifeboatError as e:
            raise WriteFailed(f"cannot write the RTO ledger object {self.store.uri}/{key}: {e}") from None

    def read(self, runbook: str | None = None) -> list[LedgerEntry]:
        prefix = f"{self.prefix}/{runbook}/" if runbook else f"{self.prefix}/"
        lines = []
        for info in self.store.list(prefix):
            try:
                lines += b"".join(self.store.read(info.key)).decode().splitlines()
            except NotFound:
                continue
        return latest_per_run(_parse(lines, self.store.uri, runbook))

    def entry(self, runbook: str, run_id: str) -> LedgerEntry | None:
        """The run's entry (its one object), or None."""
        try:
            data = b"".join(self.store.read(f"{self.prefix}/{runbook}/{run_id}.json"))
        except NotFound:
            return None
        return _last_of(data.decode().splitlines(), runbook, run_id)


def _last_of(lines: list[str], runbook: str, run_id: str) -> LedgerEntry | None:
    """The last whole snapshot of `run_id` among `lines`."""
    needle, found = json.dumps(run_id), None
    for line in lines:
        if needle not in line:  # most lines are other runs': not parsed
            continue
        try:
            entry = LedgerEntry.model_validate_json(line)
        except ValueError:
            continue
        if entry.run_id == run_id and entry.runbook == runbook:
            found = entry
    return found


def _parse(lines: list[str], where: str, runbook: str | None) -> Iterator[LedgerEntry]:
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = LedgerEntry.model_validate(json.loads(line))
        except ValueError as e:
            raise ConfigError(f"{where}:{n}: not a ledger entry: {str(e).splitlines()[0]}") from None
        if runbook is None or entry.runbook == runbook:
            yield entry
