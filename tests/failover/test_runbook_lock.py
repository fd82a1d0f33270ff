"""The runbook's failover lock on a real Prefect server: one holder, released on exit, and
lapsing when its holder dies without releasing it (a worker crash)."""

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from lifeboat_dr.kernel.errors import StandDown
from lifeboat_dr.providers.orchestrator.prefect_api import runbook_lock

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[2]


def test_one_holder_at_a_time_and_released_on_exit(prefect_server):
    held = runbook_lock("lock-a", uuid.uuid4())
    with held, pytest.raises(StandDown, match="another failover of lock-a holds its lock"):  # noqa: SIM117
        with runbook_lock("lock-a", uuid.uuid4(), wait_s=0.5):
            pass
    with runbook_lock("lock-a", uuid.uuid4(), wait_s=0.5):
        pass  # released: the next run takes it


def test_a_crashed_holder_lets_the_lock_lapse(prefect_server_process):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    crash = (
        "import os, uuid\n"
        "from lifeboat_dr.providers.orchestrator.prefect_api import runbook_lock\n"
        "with runbook_lock('lock-b', uuid.uuid4(), lease_s=60):\n"
        "    print('held', flush=True)\n"
        "    os._exit(9)  # the worker dies mid-failover: nothing releases the slot\n"
    )
    env = {"PREFECT_API_URL": prefect_server_process, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", crash], env=env, capture_output=True, text=True, timeout=60)
    assert "held" in out.stdout, out.stderr[-2000:]
    with temporary_settings({PREFECT_API_URL: prefect_server_process}):
        with pytest.raises(StandDown), runbook_lock("lock-b", uuid.uuid4(), wait_s=0.5):
            pass
        started, deadline = time.monotonic(), time.monotonic() + 150
        while True:  # the server's repossessor revokes the expired lease (60 s, Prefect's minimum)
            try:
                with runbook_lock("lock-b", uuid.uuid4(), wait_s=1):
                    break
            except StandDown:
                assert time.monotonic() < deadline, "the crashed holder's lease never lapsed"
                time.sleep(2)
        assert time.monotonic() - started < 90


def test_a_free_lock_that_a_slow_server_grants_late_is_asked_for_again_not_stood_down(
    prefect_server, monkeypatch
):
    """Under load the server may not grant a free slot within `wait_s` (the torch demo's
    failover once stood down so, its lock free): the run reads the limit, finds the slot
    free and asks again."""
    import prefect.concurrency.sync as sync

    real, attempts = sync.concurrency, []

    def slow_once(*args, **kwargs):
        attempts.append(kwargs["timeout_seconds"])
        if len(attempts) == 1:
            raise TimeoutError("the server did not answer in time")
        return real(*args, **kwargs)

    monkeypatch.setattr(sync, "concurrency", slow_once)
    with runbook_lock("lock-c", uuid.uuid4(), wait_s=0.5):
        pass
    assert len(attempts) == 2
