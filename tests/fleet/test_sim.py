"""The region-loss simulation: seeded, within the capacity, and the two rules it compares."""

from __future__ import annotations

from lifeboat_dr.core.fleet.plan import FleetJob, Place
from lifeboat_dr.core.fleet.sim import (
    Draws,
    SimSettings,
    compare,
    simulate_alone,
    simulate_arbitrated,
    table,
)

H100 = Place("gcp/us-central1", "H100")


def spans_within_capacity(jobs, capacity, outcomes) -> bool:
    gpus = {j.name: j.gpus for j in jobs}
    held = [(o.held, o.place, gpus[o.job]) for o in outcomes if o.held]
    for (start, _), place, _ in held:
        running = sum(g for (s, e), p, g in held if p == place and s <= start < e)
        if running > capacity[place]:
            return False
    return True


def test_one_seed_gives_one_history():
    assert compare(40, 7)[2:] == compare(40, 7)[2:]
    assert compare(40, 7)[2:] != compare(40, 8)[2:]


def test_neither_rule_ever_holds_more_gpus_than_the_quota():
    for seed in (1, 2, 3):
        jobs, capacity, alone, arbitrated = compare(120, seed)
        assert spans_within_capacity(jobs, capacity, alone)
        assert spans_within_capacity(jobs, capacity, arbitrated)


def test_alone_the_jobs_learn_the_shortage_by_failed_launches_and_arbitrated_by_none():
    _, _, alone, arbitrated = compare(120, 5)
    assert sum(o.failed_launches for o in alone) > 0
    assert sum(o.failed_launches for o in arbitrated) == 0
    assert [r.workload for r in table(alone)] == [r.workload for r in table(arbitrated)]


def _two_jobs_one_room():
    sft = FleetJob("sft", "finetuning", 128, 3600.0, (H100,), gpu_hour_usd=2.0)
    pretrain = FleetJob("pretrain", "pretraining", 128, 1800.0, (H100,), gpu_hour_usd=3.8)
    draws = {
        "sft": Draws(detect_s=30.0, launch_s=300.0, capacity_error_s=(60.0,), runtime_s=None),
        "pretrain": Draws(detect_s=90.0, launch_s=600.0, capacity_error_s=(60.0,), runtime_s=None),
    }
    return [sft, pretrain], {H100: 128}, draws


def test_alone_whoever_asks_first_gets_the_room():
    jobs, capacity, draws = _two_jobs_one_room()
    out = {o.job: o for o in simulate_alone(jobs, capacity, draws, SimSettings())}
    assert out["sft"].recovered_s == 330.0
    assert out["pretrain"].place is None and out["pretrain"].failed_launches > 1


def test_arbitrated_with_a_window_the_costlier_wait_gets_the_room():
    jobs, capacity, draws = _two_jobs_one_room()
    out = {o.job: o for o in simulate_arbitrated(jobs, capacity, draws, SimSettings(fleet_window_s=120.0))}
    assert out["pretrain"].recovered_s == 30.0 + 120.0 + 600.0
    assert out["sft"].place is None and out["sft"].failed_launches == 0
