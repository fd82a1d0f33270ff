"""The timer that applies the runbook's policy before Prefect's own pause timeout fires."""

import io
import threading
from datetime import UTC, datetime

from lifeboat_dr.core.approval import ApprovalProcess
from lifeboat_dr.flows.approval import PolicyTimer
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.chat.console import ConsoleChat

from .conftest import make_runbook


class SlackDown(ConsoleChat):
    def post(self, channel, text, thread=None):
        raise ProviderUnavailable("Slack chat_postMessage: service_unavailable")


def _run_timer(tmp_path, chat, **approval):
    rb = make_runbook(tmp_path, **approval)
    process = ApprovalProcess.from_runbook(rb.approval, datetime.now(UTC))
    resumed, done = [], threading.Event()

    def resume(run_id, run_input):
        resumed.append((run_id, run_input))
        done.set()

    timer = PolicyTimer(process, "run-1", chat, None, resume=resume, channel="C0INCIDENT")
    timer.start()
    assert done.wait(10), "the policy never resumed the run"
    timer.stop()
    return process, resumed


def test_policy_resumes_the_run_even_when_the_escalation_cannot_be_posted(tmp_path):
    process, resumed = _run_timer(
        tmp_path,
        SlackDown(out=io.StringIO()),
        timeout="200ms",
        escalation={"approvers": ["U0DIRECTOR"], "timeout": "200ms"},
        on_timeout="escalate",
    )
    ((run_id, decision),) = resumed
    assert run_id == "run-1" and decision["approved"] is False and decision["via"] == "policy"
    assert [s.kind for s in process.trail] == ["requested", "timed_out", "escalated", "timed_out"]


def test_escalation_is_posted_to_the_channel_when_the_card_could_not_be(tmp_path):
    out = io.StringIO()
    _run_timer(
        tmp_path,
        ConsoleChat(out=out),
        timeout="200ms",
        escalation={"approvers": ["U0DIRECTOR"], "timeout": "200ms"},
        on_timeout="proceed",
    )
    assert "Escalating: nobody approved yet. <@U0DIRECTOR>" in out.getvalue()


def test_a_stopped_timer_never_resumes(tmp_path):
    rb = make_runbook(tmp_path, timeout="300ms")
    process = ApprovalProcess.from_runbook(rb.approval, datetime.now(UTC))
    resumed = []
    timer = PolicyTimer(
        process, "run-1", ConsoleChat(out=io.StringIO()), None, resume=lambda r, i: resumed.append(r)
    )
    timer.start()
    timer.stop()  # a person decided first
    assert not timer._thread.is_alive() and resumed == []
