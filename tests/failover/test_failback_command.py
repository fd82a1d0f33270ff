"""`lifeboat failback` refusing clearly: while another failover or failback of the runbook
holds its lock, on a garbage site state, and on a runbook that never failed over."""

import uuid
from pathlib import Path

import pytest
import yaml

from lifeboat_dr.core.fencing import LEASE_KEY, fence_job, read_lease
from lifeboat_dr.core.lock import RunbookLock
from lifeboat_dr.flows.failback import failback
from lifeboat_dr.flows.sandbox import sandboxed
from lifeboat_dr.kernel.errors import StopFailover
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.shell.cli import main

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def rb(tmp_path, monkeypatch):
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(tmp_path / "ledger.jsonl"))
    rb = sandboxed(load_runbook(ROOT / "runbooks" / "demo.yaml"), "failback-cmd", root=tmp_path)
    rb.path.write_text(yaml.safe_dump(rb.model_dump(mode="json")))
    return rb


def test_failback_while_the_runbook_is_locked_stands_down_and_changes_nothing(prefect_server, rb):
    secondary, primary = _store(rb.secondary.store), _store(rb.primary.store)
    fence_job(secondary, primary, run_id="failover-1", holder="lifeboat:demo-dr")  # failed over
    before = read_lease(primary)

    with RunbookLock(secondary, rb.name, str(uuid.uuid4())):  # a failover of this runbook is running
        result = failback(str(rb.path), approval="approve")

    assert result["outcome"] == "stood-down", result
    assert read_lease(primary) == before and read_lease(secondary)[0].epoch == 1  # nobody fenced


def test_failback_on_a_garbage_site_state_stops_with_one_line_naming_it(prefect_server, rb):
    primary = _store(rb.primary.store)
    primary.put(LEASE_KEY, b"{'epoch': 2, hand-edited")

    with pytest.raises(StopFailover) as e:  # `lifeboat failback` prints it as its one line
        failback(str(rb.path), approval="approve")

    line = str(e.value)
    assert "\n" not in line, line
    assert line.startswith(f"{primary.uri.rstrip('/')}/{LEASE_KEY} is not a readable site state"), line
    assert "JSONDecodeError" in line
    assert b"".join(primary.read(LEASE_KEY)) == b"{'epoch': 2, hand-edited"  # nothing wrote over it


# Last in the file: Prefect's console log handler keeps the stream it first wrote to (capsys's).
def test_failback_with_the_primary_still_active_stops_in_one_line(prefect_server, rb, capsys):
    primary_lease = read_lease(_store(rb.primary.store))

    assert main(["failback", str(rb.path), "--approval", "approve"]) == 1

    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lifeboat failback")]
    assert len(err) == 1 and "nothing to fail back: primary is active (epoch 0)" in err[0], err
    assert read_lease(_store(rb.primary.store)) == primary_lease  # no fence, no epoch bump


def _store(uri):
    from lifeboat_dr.providers.storage import open_store

    return open_store(uri)
