"""The DR budget: each line's arithmetic, the reference band, and what is not counted."""

import pytest

from lifeboat_dr.core.advise import REFERENCE_RANGES, dr_budget

GPU_SPEND = 1024 * 3.80 * 730  # $2,840,576 per month


def _budget(**overrides):
    args = dict(
        gpus=1024,
        gpu_hour_usd=3.80,
        checkpoint_period_s=4 * 3600,
        checkpoint_size_gb=2000,
        retained_checkpoints=3,
        storage_usd_per_gb_month=0.023,
        transfer_usd_per_gb=0.02,
        standby_tier="warm",
        standby_fraction=0.10,
        standby_gpu_hour_usd=3.80,
        rto_floor_s=None,
    )
    return dr_budget(**(args | overrides))


def test_storage_counts_every_retained_checkpoint_on_the_secondary():
    lines = {line.item: line for line in _budget().lines}
    assert lines["checkpoint storage"].usd_per_month == pytest.approx(3 * 2000 * 0.023)


def test_transfer_prices_every_checkpoint_written_in_a_month():
    lines = {line.item: line for line in _budget().lines}
    assert lines["transfer"].usd_per_month == pytest.approx(730 / 4 * 2000 * 0.02)  # 182.5 copies


def test_warm_standby_holds_its_share_of_the_cluster():
    b = _budget()
    assert b.gpu_spend_usd_per_month == pytest.approx(GPU_SPEND)
    assert {line.item: line.usd_per_month for line in b.lines}["standby (warm)"] == pytest.approx(
        0.1 * GPU_SPEND
    )


def test_share_is_total_over_gpu_spend():
    b = _budget()
    assert b.share_of_gpu_spend == pytest.approx(b.total_usd_per_month / GPU_SPEND)


def test_lines_without_prices_are_listed_as_not_counted_not_guessed():
    b = _budget(checkpoint_size_gb=None)
    assert [line.item for line in b.lines] == ["standby (warm)"]
    assert len(b.not_counted) == 2 and "--checkpoint-size-gb" in b.not_counted[0]


@pytest.mark.parametrize(
    ("rto_floor_s", "fraction", "band", "verdict"),
    [
        (45 * 60, 0.10, "RTO 30-60 min", "below"),
        (45 * 60, 0.17, "RTO 30-60 min", "within"),
        (4 * 60, 0.40, "RTO < 5 min", "within"),
        (4 * 60, 1.00, "RTO < 5 min", "above"),
        (15 * 60, 0.20, None, None),
        (None, 0.20, None, None),
    ],
)
def test_budget_is_placed_against_the_reference_band_its_rto_falls_in(rto_floor_s, fraction, band, verdict):
    b = _budget(rto_floor_s=rto_floor_s, standby_fraction=fraction, checkpoint_size_gb=None)
    assert (b.reference.label if b.reference else None) == band
    assert b.verdict == verdict


def test_reference_ranges_are_the_quoted_ones():
    assert [(r.share_low, r.share_high) for r in REFERENCE_RANGES] == [(0.15, 0.20), (0.35, 0.50)]
