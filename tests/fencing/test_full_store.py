"""A full secondary at the fence (#27, low): one line naming the store, and a retry that works.

The secondary's folder is a real tmpfs of a few KB, filled up; the fence's lease write gets
ENOSPC. It used to raise a bare `OSError [Errno 28]`. So did every other write to a full
`file://` store, the runbook's lock and the ledger chain among them (found by the fault
simulator, #28): `LocalStore.put` now says it in one line, retryable.
"""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from lifeboat_dr.core.fencing import fence_job, read_lease
from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.storage.local import LocalStore
from tests.peers import missing


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KB tmpfs (needs mount rights: root in CI's container), filled to the last byte."""
    where = tmp_path / "secondary"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        missing(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    filler = where / f"filler-{uuid.uuid4().hex}"
    try:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 512):
                pass
        except OSError:  # ENOSPC: full to the last block
            pass
        finally:
            os.close(fd)
        yield where, filler
    finally:
        subprocess.run(["umount", str(where)], check=False)


def test_a_fence_on_a_full_store_fails_in_one_line_naming_it_and_a_retry_succeeds(full_disk, tmp_path):
    where, filler = full_disk
    secondary, primary = LocalStore(where), LocalStore(tmp_path / "primary")

    with pytest.raises(ProviderUnavailable) as e:
        fence_job(secondary, primary, run_id="failover-1", holder="lifeboat:dr")
    line = str(e.value)
    assert "\n" not in line and secondary.uri in line and "No space left" in line, line

    os.unlink(filler)  # someone frees space; the walker retries the step
    lease, on_primary = fence_job(secondary, primary, run_id="failover-1", holder="lifeboat:dr")
    assert lease.epoch == on_primary.epoch == 1 and read_lease(secondary)[0].run_id == "failover-1"


def test_the_lock_and_the_ledger_chain_on_a_full_store_fail_in_one_line(full_disk):
    from lifeboat_dr.core.ledger import LedgerEntry
    from lifeboat_dr.core.ledger_chain import LedgerChain
    from lifeboat_dr.core.lock import RunbookLock
    from lifeboat_dr.kernel.errors import LifeboatError

    where, _ = full_disk
    secondary = LocalStore(where)
    with pytest.raises(ProviderUnavailable, match="No space left") as e:
        RunbookLock(secondary, "trainer", "failover-1").acquire()
    assert "\n" not in str(e.value) and secondary.uri in str(e.value)
    entry = LedgerEntry(runbook="trainer", run_id="failover-1", rto_target=60, rpo_target=60)
    with pytest.raises(LifeboatError, match="no store took the record"):
        LedgerChain([secondary]).append(entry)
