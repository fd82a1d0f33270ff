"""The guard inside a real (one-rank, gloo) process group: where in the step a fault came
decides which state the emergency checkpoint holds, or that there is none."""

import sys

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from lifeboat_dr.core.guard import HangRule, TrainingGuard  # noqa: E402
from lifeboat_dr.providers.orchestrator.fake_events import FileEvents  # noqa: E402


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


class TornSGD(torch.optim.SGD):
    """SGD that, when told, updates the first weight and raises before the second."""

    tear_with: Exception | None = None

    def step(self, closure=None):
        if self.tear_with is None:
            return super().step(closure)
        with torch.no_grad():
            self.param_groups[0]["params"][0][0] -= 1.0
        raise self.tear_with


class Job:
    """A one-parameter model and its optimizer; `save` records what the guard asked for."""

    def __init__(self, tmp_path):
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.ones(2))
        self.optimizer = TornSGD([self.w], lr=0.1)
        self.saved: list[tuple[int, dict, torch.Tensor, torch.Tensor]] = []
        self.events = FileEvents(tmp_path / "events.jsonl")

    def save(self, step, record, group):
        self.saved.append((step, record, self.w.detach().clone(), torch.get_rng_state()))

    def guard(self, **kw) -> TrainingGuard:
        return TrainingGuard(
            save=self.save,
            optimizer=self.optimizer,
            events=self.events,
            job="t",
            rule=HangRule(),
            exit=sys.exit,
        )

    def step(self, fault_before=None, fault_in_update=None, fault_after=None):
        torch.randn(3)  # the batch: draws from the RNG
        if fault_before:
            raise fault_before
        self.w.grad = torch.ones(2)
        if fault_in_update:
            self.optimizer.tear_with = fault_in_update
        self.optimizer.step()
        if fault_after:
            raise fault_after


def nccl(step):
    return dist.DistBackendError(f"NCCL error: remote process exited (step {step})")


def _run(job, steps, fault_at, **faults):
    with job.guard() as guard, pytest.raises(SystemExit) as stop:
        for n in range(1, steps + 1):
            with guard.step(n):
                job.step(**({k: nccl(n) for k in faults} if n == fault_at else {}))
            if n == 2:
                guard.committed(2)
    return stop.value.code


def test_an_nccl_error_before_the_update_saves_the_previous_step_with_its_rng(group, tmp_path):
    job = Job(tmp_path)
    with job.guard() as guard:
        for n in (1, 2, 3):
            with guard.step(n):
                job.step()
        weights, rng = job.w.detach().clone(), torch.get_rng_state()
        with pytest.raises(SystemExit) as stop, guard.step(4):
            job.step(fault_before=nccl(4))
    assert stop.value.code == 80
    ((step, record, saved_w, saved_rng),) = job.saved
    assert step == 3 and torch.equal(saved_w, weights)
    assert torch.equal(saved_rng, rng), "the batch step 4 drew is drawn again after the resume"
    assert record["emergency"] == {
        "fault": "nccl",
        "step": 4,
        "consistent": True,
        "why": record["emergency"]["why"],
    }
    (event,) = job.events.read()
    assert event["event"] == "lifeboat.training.fault"
    assert {
        k: event["payload"][k] for k in ("kind", "rank", "step", "emergency_checkpoint", "exit_code")
    } == {
        "kind": "nccl",
        "rank": 0,
        "step": 4,
        "emergency_checkpoint": 3,
        "exit_code": 80,
    }
    assert event["resource"]["lifeboat.fault"] == "nccl" and event["resource"]["lifeboat.host"]
    assert "lifeboat.runbook" not in event["resource"]  # a job started without one: nothing to recover


def test_a_job_launched_by_lifeboat_names_its_runbook_on_the_events_resource(group, tmp_path, monkeypatch):
    monkeypatch.setenv("LIFEBOAT_RUNBOOK", "/srv/lifeboat/runbooks/guarded.yaml")
    monkeypatch.setenv("LIFEBOAT_RUNBOOK_NAME", "guarded")
    assert _run(Job(tmp_path), 4, 3, fault_before=True) == 80
    (event,) = FileEvents(tmp_path / "events.jsonl").read()
    assert event["resource"]["lifeboat.runbook"] == "guarded"
    assert event["resource"]["lifeboat.runbook.path"] == "/srv/lifeboat/runbooks/guarded.yaml"
    assert event["resource"]["prefect.resource.id"] == "lifeboat.job.t"


def test_an_error_after_the_update_saves_that_step(group, tmp_path):
    job = Job(tmp_path)
    assert _run(job, 5, 4, fault_after=True) == 80
    assert [s for s, *_ in job.saved] == [4]


def test_an_error_inside_the_update_writes_no_checkpoint(group, tmp_path):
    """The optimizer raised mid-update: the weights are torn, nothing vouches for them."""
    job = Job(tmp_path)
    assert _run(job, 5, 4, fault_in_update=True) == 80
    assert job.saved == []
    (event,) = job.events.read()
    assert event["payload"]["emergency_checkpoint"] is None
    assert "inside optimizer.step() of step 4: the update is torn" in event["payload"]["checkpoint_note"]


def test_a_fault_right_after_a_committed_step_writes_nothing_more(group, tmp_path):
    job = Job(tmp_path)
    assert _run(job, 5, 3, fault_before=True) == 80
    assert job.saved == []
    assert "step 2 is already committed" in job.events.read()[0]["payload"]["checkpoint_note"]


def test_a_cuda_error_exits_81_and_a_bug_in_the_script_stays_a_crash(group, tmp_path):
    job = Job(tmp_path)
    with job.guard() as guard:
        with pytest.raises(SystemExit) as stop, guard.step(1):
            raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")
        assert stop.value.code == 81  # the state is on the CPU here: readable, and step 0 is the start
        with pytest.raises(ValueError), guard.step(2):
            int("a typo in the script")
    assert job.saved == [] and len(job.events.read()) == 1


def test_a_save_that_fails_is_said_and_the_fault_still_ends_the_job(group, tmp_path):
    job = Job(tmp_path)

    def full_disk(step, record, group):
        raise OSError(28, "No space left on device")

    job.save = full_disk
    assert _run(job, 5, 4, fault_before=True) == 80
    assert (
        "the emergency save failed (OSError: [Errno 28] No space left on device)"
        in (job.events.read()[0]["payload"]["checkpoint_note"])
    )


def test_a_usr1_handler_the_job_had_still_runs_after_the_stacks(group, tmp_path, capfd):
    import os
    import signal

    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: seen.append("the job's own USR1 handler"))
    try:
        with Job(tmp_path).guard():
            os.kill(os.getpid(), signal.SIGUSR1)  # a peer's watchdog asking for our stacks
        assert seen == ["the job's own USR1 handler"]
        assert "most recent call first" in capfd.readouterr().err
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_rank_stuck_in_a_checkpoint_save_is_a_hang_that_names_the_save(group, tmp_path, monkeypatch):
    """The save is collective: a peer stopped there holds this rank in its barrier."""
    import lifeboat_dr.core.guard.loop as loop

    monkeypatch.setattr(loop, "exit_now", sys.exit)  # the hang path's hard exit, caught here
    clock, job = FakeClock(), Job(tmp_path)
    with job.guard() as guard, pytest.raises(SystemExit) as stop:
        guard.watchdog.stop()  # this test looks itself, on its own clock
        guard.watchdog.clock = clock
        for n in range(1, 7):
            with guard.step(n):
                job.step()
                clock.now += 0.01
            if n % 2 == 0:
                with guard.saving(n):
                    clock.now += 6.0 if n == 6 else 0.4  # the third save never ends
                    guard.watchdog.check()
                guard.committed(n)
    assert stop.value.code == 83
    (event,) = job.events.read()
    payload = event["payload"]
    assert (payload["kind"], payload["step"], payload["span"]) == ("hang", 6, "checkpoint save of step")
    assert payload["detail"].startswith("checkpoint save of step 6 ran 6.00 s, past the bound 5.00 s")
    assert payload["last_committed"] == 4 and payload["bound"] == 5.0  # the steps' 0.01 s never set it


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_sigterm_while_a_fault_is_reported_waits_for_the_report(group, tmp_path):
    """torchrun SIGTERMs every other rank as soon as one exits (a peer's watchdog, 83): the
    faulted rank still agrees, saves and names its fault, then exits with its own code."""
    import os
    import signal

    seen = []
    previous = signal.signal(signal.SIGTERM, lambda *_: seen.append("SIGTERM"))
    try:
        job = Job(tmp_path)
        job.save = lambda step, record, group: os.kill(os.getpid(), signal.SIGTERM)  # mid-report
        handler = signal.getsignal(signal.SIGTERM)
        with job.guard() as guard, pytest.raises(SystemExit) as stop:
            for n in range(1, 4):
                with guard.step(n):
                    job.step(fault_before=nccl(n) if n == 3 else None)
        assert stop.value.code == 80 and seen == []
        assert job.events.read()[0]["payload"]["kind"] == "nccl"
        assert signal.getsignal(signal.SIGTERM) is handler  # the job's own handler is back
    finally:
        signal.signal(signal.SIGTERM, previous)
