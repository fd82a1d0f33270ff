"""The approval gate inside a Prefect flow run: post the card, pause for a decision.

`await_approval(runbook, card, chat)` is called from the acting flows' bodies. It publishes
what it asks (run, runbook, action, epoch: the flow run input `lifeboat-ask`) and pauses the
run for input (`ApprovalForm`), so the Prefect UI shows the card above an Approve + reason
form (`lifeboat_dr.flows.approval_screen`). Anyone who can reach Prefect's API can resume a
paused run with any input, so a resume counts only when a front door that verified the
person signed that ask: `/slack/actions` for Slack clicks, the identity proxy's resume route
in `lifeboat serve` for the UI and `lifeboat approve` (`lifeboat_dr.core.approval_proof`,
Ed25519: the worker holds only public keys); the rest are refused, recorded, and the run
pauses again. For each signed decision the flow publishes whether it accepted it
(`verdict_key`), which `lifeboat approve` waits for. Prefect's Cancel on the paused run ends
the gate at once as a rejection, recorded. Prefect fails a run whose pause times out even
when the flow catches `FlowPauseTimeout`, so the policy never relies on that timeout: a
timer thread follows the state machine in `lifeboat_dr.core.approval`, posts the escalation,
and at the final deadline resumes the run itself with the policy's decision. The pause
timeout is only a backstop (`grace_s` later). The decision logic is in
`lifeboat_dr.core.approval`; this is glue.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import uuid4

from lifeboat_dr.core.approval import ApprovalProcess, Escalate
from lifeboat_dr.core.approval_proof import ASK_KEY, DECIDERS_KEY, Ask, Unverified, verdict_key, verify_signed
from lifeboat_dr.kernel.errors import LifeboatError, PreconditionFailed
from lifeboat_dr.kernel.text import one_line
from lifeboat_dr.providers.chat.base import ApprovalCard, ApprovalDecision, CardRef, Chat, Via, outcome_text

log = logging.getLogger("lifeboat.approval")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _prefect_resume(run_id: str, run_input: dict) -> None:
    from lifeboat_dr.providers.orchestrator.prefect_api import resume_run

    resume_run(run_id, run_input)


class PolicyTimer:
    """Runs the deadlines of one approval: escalate, then resume the run with the policy's
    decision. Stopped as soon as anyone else decides."""

    def __init__(
        self,
        process: ApprovalProcess,
        run_id: str,
        chat: Chat,
        ref: CardRef | None,
        *,
        resume: Callable[[str, dict], None] = _prefect_resume,
        clock: Callable[[], datetime] = _utcnow,
        on_escalate: Callable[[Escalate], None] | None = None,
        channel: str = "",
    ):
        self.process, self.run_id, self.chat, self.ref = process, run_id, chat, ref
        self.channel = channel
        self.resume, self.clock, self.on_escalate = resume, clock, on_escalate
        self._stop = threading.Event()
        self.decision: ApprovalDecision | None = None  # the policy's, once the deadline passed
        # Prefect's settings (API URL) live in context variables: carry them into the thread.
        ctx = contextvars.copy_context()
        self._thread = threading.Thread(target=ctx.run, args=(self._run,), daemon=True, name="approval-timer")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = (self.process.deadline - self.clock()).total_seconds()
            if wait > 0 and self._stop.wait(min(wait, 1.0)):
                return
            action = self.process.tick(self.clock())
            if isinstance(action, Escalate):
                if self.on_escalate:
                    self.on_escalate(action)
                mentions = " ".join(f"<@{a}>" for a in action.approvers)
                try:  # a chat outage must not stop the timer: the policy still has to resume the run
                    self.chat.post(
                        self.ref.channel if self.ref else self.channel,
                        f"Escalating: nobody approved yet. {mentions} please decide by "
                        f"{action.until.isoformat(timespec='seconds')} (run {self.run_id}).",
                        thread=self.ref,
                    )
                except Exception as e:
                    log.warning("could not post the escalation for run %s: %s", self.run_id, e)
            elif isinstance(action, ApprovalDecision):
                self.decision = action
                self._resume_until_stopped(action)
                return

    def _resume_until_stopped(self, action: ApprovalDecision) -> None:
        """Resume the run with the policy's decision; the run may be between two pauses (a
        refused resume), so try again each second until the flow stops the timer."""
        while True:
            try:
                self.resume(self.run_id, action.model_dump(mode="json"))
                return
            except Exception as e:  # a person decided in the same second: theirs stands
                log.warning("policy could not resume run %s: %s", self.run_id, e)
            if self._stop.wait(1.0):
                return


def _public_keys():
    from lifeboat_dr.core.approval_keys import public_keys

    return public_keys()


def _publish(run_id: str, key: str, value: dict) -> None:
    from lifeboat_dr.providers.orchestrator.prefect_api import publish_run_input

    publish_run_input(run_id, key, value)


MAX_REFUSALS_NOTED = 20  # the ledger keeps the newest refusals; the artifact's trail has them all


def await_approval(
    runbook,
    card: ApprovalCard,
    chat: Chat,
    *,
    ledger=None,
    clock: Callable[[], datetime] = _utcnow,
    grace_s: float = 30,
    poll_interval: int = 1,
    resume: Callable[[str, dict], None] = _prefect_resume,
    keys: Callable[[], tuple] = _public_keys,
    publish: Callable[[str, str, dict], None] = _publish,
    later: list[Callable[[], None]] | None = None,
) -> ApprovalDecision:
    """Ask for approval and wait; returns the decision (the caller stops on a rejection).

    The run pauses with the card as the form's description (`lifeboat_dr.flows.approval_screen`). A
    resume counts only if a front door signed it for this ask (run, runbook, `card.action`,
    `card.epoch`) and its approver is on the allow-list (`lifeboat_dr.core.approval_proof`,
    `ApprovalProcess.refusal`); any other is refused, recorded (trail, ledger note
    `approval refused`) and the run pauses again until the policy's deadline. Prefect's
    Cancel on the paused run is a rejection at once. Records `approval_requested` and
    `approval_granted` (or the rejection as a failure) in `ledger`, the trail as its
    `approval` note and a markdown artifact.
    The artifact and the card's update go out on a thread of their own, started at once, or
    appended to `later` for the caller to start when its next step has begun.
    Must run inside a flow run (it pauses it)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    if ctx is None:
        raise RuntimeError("await_approval pauses the current flow run: call it inside a flow")
    run_id = str(ctx.flow_run.id)
    process = ApprovalProcess.from_runbook(runbook.approval, clock())
    if process.decided:  # approval not required
        return _record(process, runbook, ledger, None, card, chat, later)

    card.run_id = run_id
    ask = Ask(run_id, runbook.name, card.action, card.epoch, jobs=tuple(card.placed) or None)
    try:  # lifeboat serve signs a person's answer to exactly this, and tells a viewer if they may
        publish(run_id, ASK_KEY, ask.to_dict())
        publish(run_id, DECIDERS_KEY, process.deciders())
    except LifeboatError as e:
        log.warning("could not publish what this gate asks (no person's decision can be signed): %s", e)
    card.run_url = card.run_url or flow_run_url(run_id)
    card.channel = card.channel or runbook.approval.channel
    card.approvers = card.approvers or list(runbook.approval.approvers)
    card.deadline = process.final_deadline
    if ledger is not None:
        ledger.mark("approval_requested", process.requested_at)
    try:
        ref = chat.post_card(card)
    except LifeboatError as e:  # Slack down mid-incident: the UI and `lifeboat approve` still work
        log.warning(
            "could not post the approval card (decide in the Prefect UI or with lifeboat approve): %s", e
        )
        if ledger is not None:
            ledger.note("approval card", f"not posted: {e}")
        ref = None

    decision = chat.answer(card)  # the flow's own answer (dry runs, drills): no resume to verify
    if decision is None:
        timer = PolicyTimer(
            process,
            run_id,
            chat,
            ref,
            resume=resume,
            clock=clock,
            on_escalate=(lambda a: ledger.note("approval escalated to", ", ".join(a.approvers)))
            if ledger
            else None,
            channel=card.channel or "",
        )
        public = keys()
        if not public:
            log.warning(
                "no approval public key (LIFEBOAT_APPROVAL_PUBLIC_KEYS): no person's decision can be "
                "verified; only the policy (or a Cancel) will decide"
            )
        timer.start()
        try:
            decision = _wait_for_verified(
                process, timer, public, ask, card, ledger, clock, grace_s, poll_interval, publish
            )
        finally:
            timer.stop()
    try:  # the timer thread has stopped: the process is ours alone again
        process.decide(decision, clock())
    except (
        PreconditionFailed
    ) as e:  # e.g. a console answer on a decided gate: the safe reading is a rejection
        process.decision = ApprovalDecision(
            approved=False, reason=str(e), approver=decision.approver, via=decision.via
        )
    return _record(process, runbook, ledger, ref, card, chat, later)


def flow_run_url(run_id: str) -> str | None:
    """The run's page in the Prefect UI (PREFECT_UI_URL, else the UI beside PREFECT_API_URL);
    None when neither is set (a temporary local server has no UI worth linking)."""
    from prefect.utilities.urls import url_for

    return url_for("flow-run", obj_id=run_id)


def _wait_for_verified(process, timer, keys, ask, card, ledger, clock, grace_s, poll_interval, publish):
    """Pause until a verified, allow-listed decision, the policy's or a Cancel; refuse everything else."""
    from lifeboat_dr.flows.approval_screen import approval_form

    refused: list[str] = []
    seen: set[str] = set()  # signatures already used at this gate: a replay is refused
    while True:
        timeout = max(math.ceil((process.final_deadline - clock()).total_seconds() + grace_s), 1)
        answer = _pause_for_input(approval_form(card, clock()), timeout, poll_interval)
        now = clock()
        if isinstance(answer, Cancelled):
            return ApprovalDecision(
                approved=False,
                reason=one_line(f"cancelled in Prefect: {answer.message or 'no message'}", 500),
                approver="prefect",
                via=Via.prefect,
            )
        # what the resume sent, not the form's defaults: a whole-plan answer at a fleet's gate
        # gains no `jobs` its signature does not cover
        run_input = answer.model_dump(exclude_unset=True)
        key = verdict_key(run_input)
        try:
            if key in seen:
                raise Unverified("a signed decision already used at this gate (a replay)")
            decision = verify_signed(keys, ask, run_input, now)
            if key is not None:
                seen.add(key)
            if (why := process.refusal(decision, now)) is None:
                _tell(publish, ask.run_id, key, accepted=True, why="accepted")
                return decision
            who = decision.approver
        except Unverified as e:
            why, who = str(e), str(run_input.get("approver") or "anonymous")
        if timer.decision is not None:  # the deadline passed while this arrived: the policy decides
            _tell(publish, ask.run_id, key, accepted=False, why="the policy decided first")
            return timer.decision
        who, why = one_line(who, 80), one_line(why, 300)
        _tell(publish, ask.run_id, key, accepted=False, why=why)
        process.refuse(who, f"refused: {why}", now)
        refused.append(f"{now.isoformat(timespec='seconds')} {who}: {why}")
        log.warning("refused a resume of run %s by %s: %s", ask.run_id, who, why)
        if ledger is not None:
            ledger.note("approval refused", "; ".join(refused[-MAX_REFUSALS_NOTED:]))


def _tell(publish, run_id: str, key: str | None, *, accepted: bool, why: str) -> None:
    """Publish whether a signed decision was accepted (`lifeboat approve` waits for it)."""
    if key is None:
        return
    try:
        publish(run_id, key, {"accepted": accepted, "why": why})
    except LifeboatError as e:
        log.warning("could not publish the verdict on a decision for run %s: %s", run_id, e)


@dataclass(frozen=True)
class Cancelled:
    """Prefect's Cancel arrived while the run waited (its state message)."""

    message: str


def _pause_for_input(form, timeout: int, poll_interval: float):
    """Pause the current run for `form` (what `prefect.flow_runs.pause_flow_run` does) and wait:
    the input once resumed, or `Cancelled` as soon as the run is Cancelling or Cancelled —
    Prefect's own pause would sit out its timeout and then fail the run. A process worker
    answers Cancelling by stopping the run's process (SIGTERM, which Prefect raises here as
    `TerminationSignal`): on a Cancel, that too is the rejection, recorded before the
    process ends."""
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext
    from prefect.exceptions import TerminationSignal
    from prefect.input.run_input import keyset_from_paused_state, run_input_subclass_from_type
    from prefect.states import Paused

    run_id = FlowRunContext.get().flow_run.id
    model = run_input_subclass_from_type(form)
    # a fresh pause key each time: the server refuses a key it has seen (a re-run's second pause)
    state = Paused(timeout_seconds=timeout, reschedule=False, pause_key=f"approval-{uuid4().hex}")
    keyset = keyset_from_paused_state(state)
    state.state_details.run_input_keyset = keyset
    with get_client(sync_client=True) as client:
        try:
            return _pause_and_wait(client, run_id, state, model, keyset, timeout, poll_interval)
        except TerminationSignal:  # a worker stops the run's process on Cancel: say so first
            current = client.read_flow_run(run_id).state
            if current is not None and (current.is_cancelling() or current.is_cancelled()):
                return Cancelled(current.message or "")
            raise


def _pause_and_wait(client, run_id, state, model, keyset, timeout: int, poll_interval: float):
    """`_pause_for_input`'s body, every line of it inside its `TerminationSignal` handler
    (the worker's SIGTERM can land between any two of them)."""
    from prefect.exceptions import Abort, FlowPauseTimeout
    from prefect.utilities.engine import propose_state_sync

    try:
        got = propose_state_sync(client=client, state=state, flow_run_id=run_id)
    except Abort as e:  # cancelled before it could pause
        got = client.read_flow_run(run_id).state
        if not (got and (got.is_cancelling() or got.is_cancelled())):
            raise RuntimeError(f"the run could not pause for approval: {e}") from None
    if got.is_cancelling() or got.is_cancelled():
        return Cancelled(got.message or "")
    if not got.is_paused():
        raise RuntimeError(f"the run could not pause for approval: Prefect answered {got.type.value}")
    model.save(keyset)
    log.info("waiting for a decision: approve or reject in Slack, the Prefect UI or `lifeboat approve`")
    give_up = time.monotonic() + timeout
    while True:
        time.sleep(poll_interval)
        current = client.read_flow_run(run_id).state
        if current is not None and current.is_running():
            return model.load(keyset)
        if current is not None and (current.is_cancelling() or current.is_cancelled()):
            return Cancelled(current.message or "")
        if time.monotonic() > give_up:
            raise FlowPauseTimeout("the run was paused for approval and never resumed")


def _record(
    process: ApprovalProcess, runbook, ledger, ref: CardRef | None, card: ApprovalCard, chat: Chat, later
):
    decision = process.decision
    at = process.trail[-1].at
    if ledger is not None:
        who, why = one_line(decision.approver, 120), one_line(decision.reason, 600)
        verdict = "approved" if decision.approved else "rejected"
        ledger.note("approval", f"{verdict} by {who} via {decision.via}: {why}")
        if decision.approved:
            ledger.mark("approval_granted", at)
        else:
            ledger.fail("approval_granted", f"rejected by {who} via {decision.via}: {why}", outcome="aborted")
    # The card's update (a chat API call) and the trail as an artifact, off the critical
    # path: the failover goes on meanwhile.
    markdown = f"# Approval for {runbook.name}\n\n" + process.trail_markdown()  # a validated name
    update = ref is not None and decision.via != Via.slack  # /slack/actions already updated the card
    outcome = (chat, ref, card, outcome_text(decision, at)) if update else None
    ctx = contextvars.copy_context()  # Prefect's client settings live in context variables
    thread = threading.Thread(target=ctx.run, args=(_announce, outcome, runbook.name, markdown), daemon=True)
    if later is None:
        thread.start()
    else:
        later.append(thread.start)
    return decision


def _announce(outcome: tuple | None, runbook: str, markdown: str) -> None:
    if outcome is not None:
        chat, ref, card, text = outcome
        try:
            chat.update_card(ref, card, text)
        except Exception as e:  # the card is a courtesy; the decision stands
            log.warning("could not update the approval card: %s", e)
    try:
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(
            markdown, key=f"approval-{runbook}", description="Who was asked, who decided, when and why"
        )
    except Exception as e:  # artifacts are a record, never a reason to fail the gate
        log.warning("could not record the approval artifact: %s", e)


class ChatGate:
    """The failover flow's `Gate`: the card in chat, the run paused for the decision,
    `approval_requested` / `approval_granted` (or the rejection) kept in the flow's ledger.
    `await_kw` passes through to `await_approval` (clock, grace_s). A `drill` gate's
    notifications begin "DRILL: ", as its card does, so nobody takes a rehearsal for an outage."""

    def __init__(self, runbook, chat: Chat, *, drill: bool = False, **await_kw):
        self.runbook, self.chat, self.drill, self.await_kw = runbook, chat, drill, await_kw
        self._later: list[Callable[[], None]] = []

    def request(self, card: ApprovalCard, ledger=None) -> ApprovalDecision:
        return await_approval(
            self.runbook, card, self.chat, ledger=ledger, later=self._later, **self.await_kw
        )

    def announce(self) -> None:
        while self._later:
            self._later.pop(0)()

    def notify(self, text: str) -> None:
        try:
            self.chat.post(
                self.runbook.approval.channel or "console", f"DRILL: {text}" if self.drill else text
            )
        except Exception as e:  # a failed page must not hide the failure it reports
            log.warning("could not notify: %s", e)
