"""A re-run of a failover's walk goes on from its record: the walker over scripted steps, a
ledger entry an earlier attempt left at some step, a world that moved on since (the resumed
job wrote a newer checkpoint)."""

from contextlib import suppress

import pytest

from lifeboat_dr.core.failover.walk import execute
from lifeboat_dr.flows.wiring import new_ledger, settings_for
from lifeboat_dr.kernel.errors import StopFailover
from lifeboat_dr.testing.failover_steps import ScriptedSteps, scripted_runbook
from tests.failover.conftest import Gate


class Snapshots:
    """A ledger sink that keeps every snapshot: the record a crash would leave at any point."""

    def __init__(self):
        self.entries = []

    def append(self, entry):
        self.entries.append(entry.model_copy(deep=True))


def first_attempt(parity=(True,)):
    rb, sink = scripted_runbook(), Snapshots()
    steps, ledger = ScriptedSteps({}, parity=parity), new_ledger(rb, "run-1", sink=sink)
    with suppress(StopFailover):
        execute(settings_for(rb), steps, ledger, Gate(), run_id="run-1")
    return rb, sink.entries


def left_after(entries, step):
    """The last snapshot before `step` was recorded done: the worker died just then."""
    return [e for e in entries if step not in e.done][-1]


def re_run(rb, prior, parity=(True,)):
    steps = ScriptedSteps({}, checkpoints=(310, 300, 200, 100), parity=parity)  # 310: the job's own
    gate, ledger = Gate(), new_ledger(rb, "run-1", prior=prior)
    with suppress(StopFailover):
        execute(settings_for(rb), steps, ledger, gate, run_id="run-1")
    return ledger.entry, steps, gate


@pytest.mark.parametrize("died_before", ["approval", "fence", "resume", "prove"])
def test_a_re_run_keeps_the_chosen_checkpoint_and_does_again_only_what_its_record_lacks(died_before):
    rb, entries = first_attempt()
    prior = left_after(entries, died_before)

    entry, steps, gate = re_run(rb, prior)

    assert entry.outcome == "completed" and entry.checkpoint.endswith("step-000300"), entry.notes
    called = {name for name, *_ in steps.calls}
    assert "certify" not in called, "the checkpoint the run chose, never certified anew"
    assert bool(gate.cards) == (died_before == "approval"), "a person asked once per decision"
    assert bool(steps.resumed) == (died_before in ("approval", "fence", "resume"))
    assert "certify (step 300, not certified anew)" in entry.notes["re-run found done"]
    assert entry.phases["outage_start"] == prior.phases["outage_start"], "first times kept"


def test_a_re_run_of_a_run_that_passed_its_proof_only_finishes_it():
    rb, entries = first_attempt()
    entry, steps, gate = re_run(rb, entries[-1].model_copy(update={"outcome": "in-progress"}))
    assert entry.outcome == "completed" and not steps.resumed and not gate.cards
    assert {name for name, *_ in steps.calls} <= {"confirm", "plan", "fence", "provision"}


def test_a_re_run_after_a_rollback_resumes_the_older_checkpoint_as_the_second_attempt():
    rb, entries = first_attempt(parity=(False, True))
    prior = next(e for e in entries if e.attempt == 2)  # died right after rolling back to step 200

    entry, steps, _ = re_run(rb, prior, parity=(False,))

    assert [r.first_step for r in steps.resumed] == [201]
    assert entry.outcome == "failed" and entry.attempt == 2, "a second failed proof stops: no third"


def test_a_run_retried_after_it_failed_and_gave_its_cluster_back_resumes_anew():
    rb, entries = first_attempt(parity=(False, False))  # failed twice: paged, cluster torn down
    failed = entries[-1]
    assert failed.outcome == "failed" and "resume" not in failed.done

    entry, steps, _ = re_run(rb, failed)

    assert entry.outcome == "completed" and [r.first_step for r in steps.resumed] == [201]


def test_a_re_run_that_fails_before_its_resume_leaves_the_cluster_its_first_attempt_provisioned():
    """Found by the fault simulator: the first attempt resumed the job and died before its
    record; the re-run's resume step then failed (the site state unreadable three times). The
    job on the cluster may be the only one training: the failed re-run leaves it, and says so."""
    rb, entries = first_attempt()
    prior = left_after(entries, "resume")
    assert "provision" in prior.done
    steps = ScriptedSteps({}, failing={"load": StopFailover("the site state is unknown")})
    ledger = new_ledger(rb, "run-1", prior=prior)
    steps.clusters.add("scripted-dr")  # as the first attempt left it

    with pytest.raises(StopFailover):
        execute(settings_for(rb), steps, ledger, Gate(), run_id="run-1")

    assert steps.clusters == {"scripted-dr"}, "not torn down"
    assert "left as an earlier attempt of this run left it" in ledger.entry.notes["cluster"]


def test_a_re_run_whose_chosen_checkpoint_is_gone_certifies_anew():
    """Found by the fault simulator: the first attempt was rejected and killed writing it; its
    entry said aborted, so retention deleted its checkpoint; the re-run took it from the
    record and failed to resume. A recorded checkpoint that no longer certifies is chosen anew."""

    class Gone(ScriptedSteps):
        def still_there(self, checkpoint):
            return False

    rb, entries = first_attempt()
    prior = left_after(entries, "approval")
    steps = Gone({}, checkpoints=(310, 300, 200, 100))
    ledger = new_ledger(rb, "run-1", prior=prior)

    execute(settings_for(rb), steps, ledger, Gate(), run_id="run-1")

    assert "certify" in {name for name, *_ in steps.calls}, "certified anew"
    assert "chosen before the re-run, is gone" in ledger.entry.notes["re-run"]
