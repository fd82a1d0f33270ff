"""The fleet plan: one region gone, many jobs, one secondary's GPUs shared without double-booking."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lifeboat_dr.core.fleet.plan import REALTIME, FleetJob, Place, fleet_order, plan_fleet

H100 = Place("gcp/us-central1", "H100")
H100_EAST = Place("gcp/us-east4", "H100")
A100 = Place("gcp/us-central1", "A100-80GB")


def job(name, gpus, *candidates, workload="pretraining", price=4.0, priority=0, rto_s=1800.0, runtime=None):
    return FleetJob(
        name=name,
        workload=workload,
        gpus=gpus,
        rto_s=rto_s,
        candidates=candidates or (H100,),
        gpu_hour_usd=price,
        priority=priority,
        runtime_left_s=runtime,
    )


def where(plan):
    return {p.job: (None if p.waits else p.place) for p in plan.placements}


def test_two_jobs_wanting_the_whole_secondary_do_not_both_get_it():
    plan = plan_fleet([job("llama-70b", 256), job("llama-8b", 256)], {H100: 256})
    assert where(plan) == {"llama-70b": H100, "llama-8b": None}
    assert plan.used() == {H100: 256}


def test_realtime_inference_is_placed_before_a_costlier_training_job():
    chat = job("chat", 64, workload=REALTIME, price=2.0)
    pretrain = job("pretrain", 128, price=4.0)
    plan = plan_fleet([pretrain, chat], {H100: 128})
    assert [p.job for p in plan.placements] == ["chat", "pretrain"]
    assert where(plan) == {"chat": H100, "pretrain": None}


def test_the_costlier_wait_goes_first_then_priority_overrides_it():
    cheap, dear = job("sft", 64, price=2.0), job("pretrain", 64, price=4.0)
    assert [j.name for j in fleet_order([cheap, dear])] == ["pretrain", "sft"]
    urgent = job("sft", 64, price=2.0, priority=1)
    assert [j.name for j in fleet_order([urgent, dear])] == ["sft", "pretrain"]


def test_equal_cost_the_shorter_rto_goes_first():
    slow, fast = job("a", 64, rto_s=3600), job("b", 64, rto_s=600)
    assert [j.name for j in fleet_order([slow, fast])] == ["b", "a"]


def test_a_job_downgrades_to_its_next_candidate_gpu_type_when_its_first_is_taken():
    plan = plan_fleet([job("first", 64, H100, A100), job("second", 64, H100, A100)], {H100: 64, A100: 64})
    second = plan.placements[1]
    assert (second.place, second.rank, second.downgraded) == (A100, 1, True)
    assert not plan.placements[0].downgraded


def test_another_region_of_the_same_gpu_type_is_no_downgrade():
    plan = plan_fleet(
        [job("a", 64, H100, H100_EAST), job("b", 64, H100, H100_EAST)], {H100: 64, H100_EAST: 64}
    )
    assert (plan.placements[1].place, plan.placements[1].downgraded) == (H100_EAST, False)


def test_a_small_job_fits_where_a_large_earlier_one_did_not():
    plan = plan_fleet([job("big", 128, price=9.0), job("small", 32, price=1.0)], {H100: 96})
    assert where(plan) == {"big": None, "small": H100}


def test_a_place_without_declared_quota_has_no_capacity():
    plan = plan_fleet([job("a", 8, H100_EAST)], {H100: 512})
    assert where(plan) == {"a": None}


def test_a_waiting_job_takes_the_gpus_a_finishing_batch_frees_and_says_when():
    batch = job("embed", 64, workload="batch-inference", price=9.0, runtime=1800.0)
    plan = plan_fleet([batch, job("sft", 64, price=2.0)], {H100: 64}, recovery_s=4 * 3600)
    sft = plan.placements[1]
    assert (sft.job, sft.wait_s, sft.place) == ("sft", 1800.0, H100)
    assert "waits 30m, then gcp/us-central1 H100" in sft.describe()


def test_a_job_nothing_frees_for_waits_until_the_primary_is_expected_back():
    plan = plan_fleet([job("a", 64), job("b", 64)], {H100: 64}, recovery_s=4 * 3600)
    b = plan.placements[1]
    assert (b.wait_s, b.place) == (4 * 3600, None)
    assert b.describe() == "b: waits 4.0h, then the recovered primary ($256/h of lost compute)"
    assert plan_fleet([job("a", 64), job("b", 64)], {H100: 64}).placements[1].wait_s is None


def test_unknown_prices_rank_at_the_fleets_mean():
    known, unknown = job("known", 64, price=2.0), job("unknown", 65, price=None)
    assert [j.name for j in fleet_order([known, unknown])] == ["unknown", "known"]


# --- the property: over random fleets, no plan exceeds capacity, every job is placed or waits,
# and no job is passed over for capacity it could have used.

PLACES = [Place(f"cloud{c}/region{r}", gpu) for c in range(2) for r in range(2) for gpu in ("H100", "A100")]
WORKLOADS = ["pretraining", "finetuning", "batch-inference", REALTIME]

jobs = st.builds(
    FleetJob,
    name=st.just(""),
    workload=st.sampled_from(WORKLOADS),
    gpus=st.sampled_from([1, 8, 16, 64, 128, 256]),
    rto_s=st.sampled_from([10.0, 300.0, 1800.0, 3600.0]),
    candidates=st.lists(st.sampled_from(PLACES), min_size=1, max_size=4, unique=True).map(tuple),
    gpu_hour_usd=st.one_of(st.none(), st.floats(0.5, 12.0)),
    priority=st.integers(-1, 2),
    runtime_left_s=st.one_of(st.none(), st.floats(60.0, 20_000.0)),
)
fleets = st.lists(jobs, min_size=0, max_size=40).map(
    lambda js: [FleetJob(**{**vars(j), "name": f"job-{i:02d}"}) for i, j in enumerate(js)]
)
capacities = st.dictionaries(st.sampled_from(PLACES), st.integers(0, 600), max_size=len(PLACES))


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(fleets, capacities, st.one_of(st.none(), st.floats(600.0, 50_000.0)))
def test_no_fleet_plan_allocates_more_than_the_capacity_or_passes_a_job_over(fleet, capacity, recovery_s):
    plan = plan_fleet(fleet, capacity, recovery_s=recovery_s)
    by_name = {j.name: j for j in fleet}

    # every job exactly once: placed now, or waiting (with its expected wait or none known)
    assert sorted(p.job for p in plan.placements) == sorted(by_name)
    for p in plan.placements:
        assert p.waits == (p.wait_s != 0)
        if p.place is not None:
            assert p.place in by_name[p.job].candidates
            assert p.wait_s is not None and (recovery_s is None or p.wait_s < recovery_s)

    # never more than the capacity, now or at any moment a batch ends and another starts
    spans = [
        (p.wait_s, p.wait_s + (by_name[p.job].runtime_left_s or float("inf")), p.place, p.gpus)
        for p in plan.placements
        if p.place is not None
    ]
    for moment in {start for start, *_ in spans}:
        for place in {pl for *_, pl, _ in spans}:
            running = sum(g for start, end, pl, g in spans if pl == place and start <= moment < end)
            assert running <= capacity.get(place, 0), f"{place} at {moment}s: {running} GPUs"

    # priorities: realtime first, and a job waiting now could use none of its candidates'
    # room left after the jobs before it were placed
    order = [p.job for p in plan.placements]
    realtime = [by_name[n].workload == REALTIME for n in order]
    assert realtime == sorted(realtime, reverse=True)
    for p in plan.waiting():
        before = [q for q in plan.placed() if q.order < p.order]
        for place in by_name[p.job].candidates:
            room = capacity.get(place, 0) - sum(q.gpus for q in before if q.place == place)
            assert room < p.gpus, f"{p.job} waits though {place} had {room} GPUs free before it"
