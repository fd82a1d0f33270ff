"""`FailbackSteps`: the failover's steps, run back to the recovered primary.

A failback is a failover with the sites' roles swapped (`lifeboat_dr.flows.wiring.swapped`), walked by
the same walker over the same graph, with four differences:

- `confirm` checks there is something to fail back (the secondary is active) and runs the
  reverse replication that catches the primary up (secondary -> primary, by the site state);
- `certify` catches up once more, then certifies on the primary (the active lineage only):
  the checkpoint the approval card shows;
- `fence` makes the primary active (both stores), then waits for the secondary's job to
  stop at its next checkpoint boundary (its guarded commit is refused and it exits), keeps
  its log and stops its cluster; then hands back what that job committed before the fence
  (`lifeboat_dr.core.replication.direction.hand_back`) and certifies again on the primary:
  the resume starts from the newest checkpoint the secondary's job committed
  (`Fenced.checkpoint`);
- `prove` compares the resumed losses with the secondary job's own log (the lineage that
  wrote the checkpoint), not the runbook's pre-failure log.

The ledger entry's kind is `failback`; its RTO runs from the request to the first step on
the primary, its RPO from the resumed checkpoint's write time to the fence (the work the
secondary's job did after its last commit is done again on the primary).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from lifeboat_dr.core.certify import CertifyReport
from lifeboat_dr.core.failover.contract import Confirmation, Fenced
from lifeboat_dr.core.failover.proof import ProofPlan
from lifeboat_dr.core.failover.steps import ProviderSteps
from lifeboat_dr.core.replication.copying import ReplicationReport
from lifeboat_dr.kernel.errors import LifeboatError, NotFound, ProviderUnavailable, StopFailover


class FailbackSteps(ProviderSteps):
    """See the module docstring. `catch_up()` runs one reverse replication pass and returns
    `(Direction, ReplicationReport)` (`replicate_by_site_state` in core/replication/direction.py);
    `hand_back()` the copy after the fence (`hand_back`, beside it)."""

    def __init__(
        self,
        spec,
        providers,
        *,
        standby_cluster: str,
        catch_up: Callable[[], tuple],
        hand_back: Callable[[], ReplicationReport],
        stop_timeout_s: float = 60.0,
        **kw,
    ):
        super().__init__(dataclasses.replace(spec, loss_log=self.standby_log), providers, force=True, **kw)
        self.standby_cluster, self.catch_up_once, self.hand_back = standby_cluster, catch_up, hand_back
        self.stop_timeout_s = stop_timeout_s
        self.standby_logs = ""
        self.rerun = False  # this run's fence already landed (a re-run after a crash)

    def sites(self):
        from lifeboat_dr.core.sitestate import site_stores

        # real roles: the swapped view's secondary store is the runbook's primary
        return site_stores(self.p.secondary, self.p.primary, self.p.witness)

    def catch_up(self) -> str:
        way, report = self.catch_up_once()
        if way.source_role != "secondary":
            raise StopFailover(f"nothing to fail back: {way.state.describe()}")
        if report.failed:
            raise ProviderUnavailable(f"reverse replication failed: {', '.join(report.failed)}")
        return (
            f"reverse replication {way.source.uri} -> {way.destination.uri}: "
            f"{len(report.transfers)} checkpoint(s) checked, {report.bytes_copied} bytes copied"
        )

    def confirm(self) -> Confirmation:
        state = self.site_state()
        self.superseded(state)
        lease = state.lease
        self.rerun = state.active == "primary" and lease is not None and lease.run_id == self.run_id
        if state.active != "secondary" and not self.rerun:
            raise StopFailover(f"nothing to fail back: {state.describe()}")
        self.expected_epoch = state.epoch
        now = self.clock()
        if self.rerun:  # crashed after its fence: the steps after it run again, nothing is re-fenced
            lines = (f"failback re-run: this run already fenced ({state.describe()})",)
        else:
            lines = (f"failback requested: {state.describe()}", self.catch_up())
        return Confirmation(self.outage_started_at or now, self.detected_at or now, lines)

    def certify(self, older_than: int | None = None) -> CertifyReport:
        if older_than is None and not self.rerun and self.expected_epoch == self.site_state().epoch:
            self.catch_up()  # the secondary still writes until the fence: take its newest
        return super().certify(older_than)

    def fence(self, checkpoint: CertifyReport | None = None) -> Fenced:
        # the standby's job commits until it stops at its boundary: the seal counts them all,
        # and the resume seals again at the checkpoint the hand-back leaves newest
        fenced = super().fence()
        handed = self._handover_record()  # a re-run: what the crashed attempt kept
        if handed is not None and handed["step"] is not None:  # it even handed back: resume there
            self.standby_logs = handed["log"]
            checkpoint = self.certify(older_than=handed["step"] + 1)
            note = f"re-run: resumes from step {checkpoint.certified.step}, handed back before the crash"
            return dataclasses.replace(fenced, primary_stopped=True, checkpoint=checkpoint, note=note)
        if handed is not None:  # the standby's job was stopped and its log kept already
            self.standby_logs, stopped = handed["log"], True
        else:
            stopped = self._stop_at_checkpoint_boundary()
        try:  # after the fence a failure must not strand the job: resume from what is there
            report = self.hand_back()
            copied = f"{len(report.transfers)} checkpoint(s) checked, {report.bytes_copied} bytes copied"
            failed = f"; failed: {', '.join(report.failed)}" if report.failed else ""
        except LifeboatError as e:
            copied, failed = "nothing copied", f"; failed: {e}"
        self.__dict__.pop("clocks", None)  # the RPO runs to the fence: the skew as it is now
        checkpoint = self.certify()
        self._record_handover(checkpoint.certified.step)
        note = (
            f"hand back {self.p.primary.uri} -> {self.p.secondary.uri}: {copied}{failed}; "
            f"resumes from step {checkpoint.certified.step}, the newest certified on the primary"
        )
        return dataclasses.replace(fenced, primary_stopped=stopped, checkpoint=checkpoint, note=note)

    @property
    def _handover_key(self) -> str:
        return f"_lifeboat/failback/{self.run_id}.json"

    def _record_handover(self, step: int | None) -> None:
        """Keep the standby job's log (before its cluster goes), then the step resumed from,
        beside the primary's lease: a re-run after a crash proves against the same log and
        resumes from the same step."""
        body = json.dumps({"step": step, "log": self.standby_logs}).encode()
        self.p.secondary.put(self._handover_key, body)  # the view's secondary: the real primary

    def _handover_record(self) -> dict | None:
        if not self.rerun:
            return None
        try:
            doc = json.loads(b"".join(self.p.secondary.read(self._handover_key)))
            step = doc["step"]
            return {"step": None if step is None else int(step), "log": str(doc["log"])}
        except NotFound:
            return None
        except (ValueError, KeyError, TypeError) as e:
            raise StopFailover(f"{self.p.secondary.uri}/{self._handover_key} is unreadable: {e}") from None

    def _stop_at_checkpoint_boundary(self) -> bool:
        """The fenced job exits at its next commit; wait for that, then stop its cluster.
        True when it stopped at a checkpoint boundary on its own."""
        compute, deadline = self.p.compute, self.monotonic() + self.stop_timeout_s
        on_its_own = False
        try:
            while self.monotonic() < deadline:
                if compute.status(self.standby_cluster).job.finished:
                    on_its_own = True
                    break
                self.sleep(self.poll_s)
            self.standby_logs = compute.logs(self.standby_cluster)
            self._record_handover(None)
            compute.teardown(self.standby_cluster)
        except LifeboatError:
            return on_its_own  # gone already, or unreachable: the lease keeps it from committing
        return on_its_own

    def plan_proof(self, checkpoint: CertifyReport) -> ProofPlan:
        """Before the approval the secondary's job still trains: its log is kept at the fence."""
        step = self.spec.parity_steps
        return ProofPlan(
            checkpoint.certified.step,
            "own" if step else "none",
            None,
            f"its first {step} step(s) against the secondary job's log, kept when it stops; when it "
            "stopped at the checkpoint itself, a replay of the previous one beside it"
            if step
            else "not provable: loss parity disabled (parity_steps: 0)",
            resumes=f"the newest checkpoint the secondary's job commits before it stops (step "
            f"{checkpoint.certified.step} or newer)",
        )

    def standby_log(self) -> str:
        """The secondary job's log: the losses the primary's resumed steps must reproduce."""
        return self.standby_logs
