"""The declared quota capped by the live one (`core/fleet/live_quota.py`): only ever lowered, a
shared pool never overflowed (a property over random fleets), whole instances only, and an
unknown pool planned as declared and said."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lifeboat_dr.core.fleet.live_quota import Unknown, capped
from lifeboat_dr.core.fleet.plan import Place
from lifeboat_dr.providers.compute.service_quotas import InstanceShape

H100, A100 = Place("aws/us-west-2", "H100"), Place("aws/us-west-2", "A100")
GCP = Place("gcp/us-central1", "H100")
POOL = "aws/us-west-2 L-417A185B"
SHAPES = {
    H100: InstanceShape("us-west-2", "L-417A185B", 24.0, 8),
    A100: InstanceShape("us-west-2", "L-417A185B", 12.0, 8),
}


def test_a_pool_that_covers_the_declared_quota_changes_nothing():
    quota, lines = capped({H100: 64, GCP: 96}, SHAPES, {POOL: 64 * 24})
    assert quota == {H100: 64, GCP: 96}
    assert lines == [f"{POOL}: live quota 1536 vCPUs covers the declared 64 H100"]


def test_an_overflowing_pool_scales_every_gpu_type_in_it_to_whole_instances():
    quota, lines = capped({H100: 96, A100: 160, GCP: 96}, SHAPES, {POOL: 1536})

    # 96 H100 (2,304 vCPUs) and 160 A100 (1,920) share 1,536: each at 1536/4224, whole p5/p4d
    assert quota == {H100: 32, A100: 56, GCP: 96}
    assert 32 * 24 + 56 * 12 <= 1536
    assert lines == [
        f"{POOL}: live quota 1536 vCPUs is less than the declared 160 A100, 96 H100 (4224 vCPUs); "
        "planning on 56 A100, 32 H100"
    ]


def test_an_unknown_pool_is_planned_as_declared_and_said():
    quota, lines = capped({H100: 96}, SHAPES, {POOL: Unknown("AccessDeniedException")})
    assert quota == {H100: 96}
    assert lines == [f"{POOL}: live quota unknown (AccessDeniedException); planning on the declared 96 H100"]


def test_a_value_that_is_no_quota_is_unknown_never_a_cap():
    for said in (-1.0, float("nan"), float("inf")):
        quota, lines = capped({H100: 96}, SHAPES, {POOL: said})
        assert quota == {H100: 96}
        assert lines == [
            f"{POOL}: live quota unknown (the service said {said!r} vCPUs); planning on the declared 96 H100"
        ]


@given(
    declared=st.dictionaries(
        st.sampled_from([H100, A100, GCP]), st.integers(min_value=0, max_value=4096), min_size=1
    ),
    live=st.floats(min_value=0, max_value=200_000, allow_nan=False),
    per_instance=st.sampled_from([1, 4, 8]),
)
def test_the_cap_never_raises_a_place_nor_overflows_its_pool(declared, live, per_instance):
    shapes = {p: s._replace(gpus_per_instance=per_instance) for p, s in SHAPES.items()}
    quota, _ = capped(declared, shapes, {POOL: live})

    assert set(quota) == set(declared)
    assert all(0 <= quota[p] <= declared[p] for p in declared)
    in_pool = [p for p in declared if p in shapes]
    used = sum(quota[p] * shapes[p].vcpus_per_gpu for p in in_pool)
    assert used <= live or all(quota[p] == declared[p] for p in in_pool)  # capped only when it overflows
    if sum(declared[p] * shapes[p].vcpus_per_gpu for p in in_pool) > live:
        assert used <= live and all(quota[p] % per_instance == 0 for p in in_pool)
