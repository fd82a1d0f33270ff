"""One replication pass of a runbook at a time (found by the fault simulator, #28).

Two passes at once (a scheduled run outlasting its 5-minute interval, a `lifeboat replicate`
by hand): one copied the resumed job's step 30 to the standby, the other, which had planned
against the standby's older listing, unmarked it to copy it again and stalled; the first
one's retention, planned while step 30 was whole, then deleted steps 20 and 10: no
certifiable checkpoint left on the standby. A pass now holds the runbook's replication
lock in the secondary's store; a second one changes nothing.
"""

from __future__ import annotations

import pytest

from lifeboat_dr.core.lock import REPLICATION_LOCK_KEY, one_replication_pass
from lifeboat_dr.kernel.errors import StandDown
from lifeboat_dr.providers.storage.local import LocalStore


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_second_replication_pass_stands_down_while_one_runs(make_store, backend):
    secondary = make_store(backend)
    with one_replication_pass(secondary, "trainer", "pass-1") as held:
        assert held is not None and secondary.head(REPLICATION_LOCK_KEY)
        with (
            pytest.raises(StandDown, match="another replication pass of trainer holds its lock"),
            one_replication_pass(secondary, "trainer", "pass-2"),
        ):
            pass
    with one_replication_pass(secondary, "trainer", "pass-3"):  # released: the next one runs
        pass


def test_a_dry_run_takes_no_lock(tmp_path):
    secondary = LocalStore(tmp_path / "secondary")
    with (
        one_replication_pass(secondary, "trainer", "pass-1"),
        one_replication_pass(secondary, "trainer", "dry", dry_run=True) as held,
    ):
        assert held is None
