"""The interval maths against hand arithmetic and against its own exact waste model."""

import math

import pytest

from lifeboat_dr.core.advise import (
    cluster_mtbf_s,
    daly_interval_s,
    expected_rework_exact_s,
    expected_rework_s,
    expected_rpo_s,
    expected_waste_fraction,
    gpu_cost_usd,
    gpu_mtbf_from_observed_s,
    worst_rpo_s,
    young_interval_s,
)

H = 3600.0


def test_young_interval_is_square_root_of_twice_write_time_times_mtbf():
    # C = 5 min, M = 8 h: sqrt(2 * 300 s * 28,800 s) = sqrt(17,280,000) s = 4,156.9 s = 69.3 min.
    assert young_interval_s(300, 8 * H) == pytest.approx(4156.92, abs=0.01)


def test_daly_interval_follows_the_higher_order_formula():
    c, m = 300.0, 8 * H
    x = c / (2 * m)
    by_hand = math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c
    assert daly_interval_s(c, m) == pytest.approx(by_hand)
    assert daly_interval_s(c, m) < young_interval_s(c, m)  # the -C term dominates here


def test_daly_interval_is_the_mtbf_when_a_checkpoint_takes_twice_the_mtbf():
    assert daly_interval_s(checkpoint_write_s=3 * H, mtbf_s=1 * H) == 1 * H
    assert daly_interval_s(checkpoint_write_s=2 * H, mtbf_s=1 * H) == 1 * H


def test_daly_approaches_young_when_checkpoints_are_cheap():
    c, m = 1.0, 30 * 24 * H
    assert daly_interval_s(c, m) == pytest.approx(young_interval_s(c, m), rel=1e-3)


@pytest.mark.parametrize(
    ("c", "r", "m"), [(120, 600, 3 * H), (300, 600, 8 * H), (900, 1800, 5 * 24 * H), (900, 300, 2 * H)]
)
def test_daly_interval_is_near_the_minimum_of_the_exact_waste(c, r, m):
    grid = [daly_interval_s(c, m) * f for f in (0.25 + 0.01 * i for i in range(400))]
    best = min(expected_waste_fraction(t, c, r, m) for t in grid)
    assert expected_waste_fraction(daly_interval_s(c, m), c, r, m) <= best * 1.002


def test_waste_grows_when_the_interval_is_far_from_the_optimum():
    c, r, m = 300.0, 600.0, 8 * H
    at_daly = expected_waste_fraction(daly_interval_s(c, m), c, r, m)
    assert expected_waste_fraction(10 * 60, c, r, m) > 1.5 * at_daly  # checkpointing too often
    assert expected_waste_fraction(8 * H, c, r, m) > 1.5 * at_daly  # too rarely
    assert expected_waste_fraction(0, c, r, m) == 1.0


def test_waste_without_failures_in_sight_is_the_write_overhead():
    # M huge: waste -> C / (T + C).
    assert expected_waste_fraction(3600, 36, 0, 1e12) == pytest.approx(36 / 3636, rel=1e-6)


def test_cluster_mtbf_divides_one_gpus_mtbf_by_the_gpu_count():
    assert cluster_mtbf_s(50_000 * H, 1024) == pytest.approx(48.83 * H, rel=1e-3)


def test_llama3_interruptions_give_a_per_gpu_mtbf_near_fifty_thousand_hours():
    # 419 unexpected interruptions in 54 days on 16,384 GPUs.
    gpu_mtbf = gpu_mtbf_from_observed_s(419, 54 * 24 * H, 16_384)
    assert gpu_mtbf / H == pytest.approx(50_677, abs=1)
    assert cluster_mtbf_s(gpu_mtbf, 16_384) / H == pytest.approx(54 * 24 / 419)


def test_a_four_hour_interval_with_a_five_day_mtbf_loses_about_two_hours_per_failure():
    assert expected_rework_s(4 * H, 0) == 2 * H
    exact = expected_rework_exact_s(4 * H, 0, 5 * 24 * H)
    assert 1.95 * H < exact < 2 * H  # an early failure is slightly likelier than a late one


def test_rpo_is_half_a_period_on_average_plus_the_replication_lag():
    assert expected_rpo_s(3600, 60, replication_s=300) == 1830 + 300
    assert worst_rpo_s(3600, 60, replication_s=300) == 3960


def test_gpu_cost_of_two_hours_on_1024_gpus_at_3_80():
    assert gpu_cost_usd(1024, 2, 3.80) == pytest.approx(7782.40)
