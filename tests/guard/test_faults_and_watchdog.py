"""The guard's rules without torch or threads: which errors are faults, and when a step is a hang."""

import pytest

from lifeboat_dr.core.guard import EXIT_CODES, HangRule, StepWatchdog, fault_kind
from lifeboat_dr.core.guard.faults import poisons_device


def _named(name: str, base: type = RuntimeError) -> type:
    return type(name, (base,), {})  # torch's classes are matched by name: no torch needed here


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (
            _named("DistBackendError")("NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited"),
            "nccl",
        ),
        (_named("DistNetworkError")("Connection reset by peer"), "nccl"),
        (
            _named("DistBackendError")("Watchdog caught collective operation timeout: WorkNCCL(...)"),
            "timeout",
        ),
        (
            RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Timed out waiting 1800000ms"),
            "timeout",
        ),
        (_named("AcceleratorError")("CUDA error: an illegal memory access was encountered"), "cuda"),
        (RuntimeError("CUDA error: unspecified launch failure"), "cuda"),
        (_named("OutOfMemoryError")("CUDA out of memory. Tried to allocate 2.00 GiB"), "cuda"),
        (RuntimeError("NCCL error: unhandled system error"), "nccl"),
        (ValueError("shapes (16,) and (32,) not aligned"), None),  # the script's bug: a crash
        (RuntimeError("expected scalar type Float but found Half"), None),
    ],
)
def test_faults_are_told_apart_from_bugs_in_the_script(error, kind):
    assert fault_kind(error) == kind


def test_each_kind_exits_with_its_own_code_and_none_is_fenced_outs():
    assert EXIT_CODES == {"nccl": 80, "cuda": 81, "timeout": 82, "hang": 83}
    assert 75 not in EXIT_CODES.values()


def test_every_cuda_error_but_out_of_memory_poisons_the_device():
    assert poisons_device(_named("AcceleratorError")("CUDA error: an illegal memory access was encountered"))
    assert not poisons_device(_named("OutOfMemoryError")("CUDA out of memory."))
    assert not poisons_device(_named("DistBackendError")("NCCL error"))


def test_the_bound_is_the_multiple_of_the_median_once_warm_never_below_the_floor():
    rule = HangRule(multiple=10, floor_s=0.5, first_s=60, warmup=3, window=5)
    assert rule.bound() == 60  # no step measured: compile and warm-up are not hangs
    for seconds in (0.2, 0.3):
        rule.record(seconds)
    assert rule.bound() == 60
    rule.record(0.25)
    assert rule.bound() == pytest.approx(2.5)  # 10 x median 0.25
    for _ in range(5):
        rule.record(0.01)  # the window forgets the slow first steps
    assert rule.bound() == 0.5  # 10 x 0.01 is under the floor


def test_a_rule_that_would_call_every_step_a_hang_is_refused():
    with pytest.raises(ValueError, match="multiple > 1"):
        HangRule(multiple=1)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_watchdog_fires_once_for_a_step_past_the_bound_and_not_before():
    clock, fired = FakeClock(), []
    dog = StepWatchdog(HangRule(multiple=4, floor_s=1, warmup=2), lambda *a: fired.append(a), clock=clock)
    for n in (1, 2, 3):
        dog.begin(n)
        clock.now += 0.5
        assert not dog.check()
        dog.end()
    dog.begin(4)  # bound: max(4 x 0.5, 1) = 2 s
    clock.now += 2.0
    assert not dog.check() and fired == []
    clock.now += 0.1
    assert dog.check()
    assert fired == [(4, pytest.approx(2.1), pytest.approx(2.0))]
    clock.now += 10
    assert not dog.check() and len(fired) == 1  # once: the handler ends the process


def test_a_step_that_raised_is_not_watched_any_more():
    clock, fired = FakeClock(), []
    dog = StepWatchdog(HangRule(first_s=1), lambda *a: fired.append(a), clock=clock)
    dog.begin(1)
    dog.pause()  # the guard handles the exception (its own bounded agreement and save)
    clock.now += 100
    assert not dog.check() and fired == []


def test_a_checkpoint_save_is_watched_against_saves_and_leaves_the_steps_median_alone():
    clock, fired = FakeClock(), []
    steps, saves = HangRule(multiple=4, floor_s=1, warmup=2), HangRule(multiple=4, floor_s=1, warmup=2)
    dog = StepWatchdog(steps, lambda *a: fired.append(a), clock=clock)
    for n, rule, seconds in ((1, None, 0.1), (2, None, 0.1), (2, saves, 3.0), (4, saves, 3.0)):
        dog.begin(n, rule)
        clock.now += seconds
        assert not dog.check()
        dog.end()
    assert (steps.bound(), saves.bound()) == (1.0, 12.0)  # a 3 s save is no hang; a 3 s step is
    dog.begin(6, saves)
    clock.now += 11.9
    assert not dog.check()
    clock.now += 0.2
    assert dog.check() and fired == [(6, pytest.approx(12.1), 12.0)]
