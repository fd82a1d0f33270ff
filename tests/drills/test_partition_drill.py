"""The partition drill in network namespaces: connections to the primary *hang*, detection comes
from bounded timeouts at two vantage points, the failover completes with its RTO in the
ledger, the zombie primary is kept out afterwards, and nothing is left running.

Needs root and iproute2 (`ip netns`); skips saying why where namespaces cannot be created
(tried for real). Every namespace and process of a run is removed by the fixture even when
the drill is killed half-way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from lifeboat_dr.flows.drills.partition.drill import DRILL_ENV
from lifeboat_dr.flows.drills.partition.netns import Sites, leftovers, unavailable
from tests.peers import missing

ROOT = Path(__file__).resolve().parents[2]
DRILL_TIMEOUT_S = 420  # the whole drill process; it bounds each of its own steps far below

# alone: the drill's checks are time bounds (probe waits, the fence), measured with the cores to itself
pytestmark = [pytest.mark.integration, pytest.mark.alone, pytest.mark.timeout(DRILL_TIMEOUT_S + 60)]


def _kill_namespace_processes(tag: str) -> None:
    for ns in leftovers(tag):
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10)
        for pid in pids.stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


@pytest.fixture
def tag():
    """A namespace prefix unique to this test run; whatever is left of it is removed after."""
    if why := unavailable():
        missing(f"network namespaces unavailable: {why}")
    name = f"lbpt-{uuid.uuid4().hex[:6]}"
    yield name
    _kill_namespace_processes(name)
    assert leftovers(name) == []


def test_a_hung_primary_is_detected_failed_over_and_fenced_out_with_nothing_left_running(tag, tmp_path):
    out = tmp_path / "result.json"
    argv = [
        sys.executable,
        "-m",
        "lifeboat_dr.flows.drills.partition.drill",
        "--json",
        str(out),
        "--tag",
        tag,
    ]
    argv += ["--workdir", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip
    try:
        printed, _ = proc.communicate(timeout=DRILL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"the drill did not finish within {DRILL_TIMEOUT_S} s")
    assert proc.returncode == 0, printed
    result = json.loads(out.read_text())
    failed = [f"{name}: {detail}" for name, ok, detail in result["checks"] if not ok]
    assert not failed, "\n".join(failed) + "\n" + printed + result.get("log_tail", "")
    assert result["control_exit"] == 0 and result["namespaces_left"] == []

    # detection came from bounded timeouts, from both vantage points, for every vote
    detection = result["detection"]
    assert detection["state"] == "confirmed" and len(detection["votes"]) >= 2
    # ... one vote per unreachable target: the primary's store (heartbeat and listing share it)
    # and its region API (the provider signal's endpoint)
    assert detection["independent"] == 2
    assert detection["sources"] == ["unreachable:10.77.0.1:5000", "unreachable:10.77.0.1:8080"]
    store_votes = [v for v in detection["votes"] if v["signal"] != "provider"]
    assert len(store_votes) == 2 and all("also unreachable for" in v["summary"] for v in store_votes)
    for vote in detection["votes"]:
        assert {v["vantage"] for v in vote["vantages"]} == {"control-plane", "secondary"}
        # each vantage could not reach the target: the store calls were cut off (unknown), the
        # API probe's own pings all timed out (failing, unreachable); each within its bound
        bound = 4 * float(DRILL_ENV["LIFEBOAT_PROBE_DEADLINE"]) + 1  # the API probe's 3 pings, and slack
        assert all(
            v["status"] in ("unknown", "failing") and v["took_s"] <= bound for v in vote["vantages"]
        ), vote
    # the failover completed with its RTO and RPO recorded in the ledger
    failover = result["failover"]
    final = result["ledger"]
    assert final["outcome"] == "completed" and final["drill"] is True
    assert {"outage_start", "first_step"} <= set(final["phases"]) and final["checkpoint"] == failover[
        "checkpoint"
    ]
    assert 0 < failover["rto_s"] < 300 and failover["rpo_s"] >= 0
    print("\n".join(line for line in printed.splitlines() if line.startswith(("detection", "failover"))))


@pytest.mark.processes
def test_lifeboat_drill_kind_partition_is_the_quarterly_az_test_in_one_command(tag, tmp_path):
    argv = [sys.executable, "-m", "lifeboat_dr.shell.cli", "drill", str(ROOT / "runbooks" / "demo.yaml")]
    argv += ["--kind", "partition"]
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the drill's work folder, kept after a failure
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=DRILL_TIMEOUT_S
    )

    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "drill partition: passed" in done.stdout, said
    assert "[PASS] failover completed with RTO and RPO in the ledger" in done.stdout, said
    assert "[FAIL]" not in done.stdout and "network namespaces left: none" in done.stdout, said


def test_the_cut_makes_connections_hang_until_the_clients_timeout_and_close_leaves_nothing(tag):
    """The rig itself: a listener on the primary is reached, then hangs (not refused) while
    cut, then is reached again; close() kills the processes and removes the namespaces."""
    sites = Sites(tag).up()
    try:
        server = sites.spawn("primary", [sys.executable, "-c", _LISTEN.format(host=sites.addr["primary"])])
        time.sleep(0.5)

        def connect(timeout: float) -> str:
            code = _CONNECT.format(host=sites.addr["primary"], timeout=timeout)
            done = sites.run("control", [sys.executable, "-c", code], timeout=timeout + 20,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
            return done.stdout.strip()

        assert connect(5) == "connected"
        sites.partition()
        started = time.monotonic()
        assert connect(1.5) == "timeout"  # hangs: neither refused nor unreachable
        assert time.monotonic() - started >= 1.5
        sites.restore()
        assert connect(5) == "connected"
    finally:
        sites.close()
    assert server.poll() is not None and leftovers(tag) == []


_LISTEN = """
import socket
s = socket.socket(); s.bind(("{host}", 7000)); s.listen()
while True:
    c, _ = s.accept(); c.close()
"""
_CONNECT = """
import socket
try:
    socket.create_connection(("{host}", 7000), timeout={timeout}).close(); print("connected")
except socket.timeout:
    print("timeout")
except OSError as e:
    print(f"error {{e}}")
"""


def test_a_drill_killed_half_way_leaves_nothing_once_its_namespaces_are_swept(tag, tmp_path):
    """Half-done: the drill is SIGKILLed with its sites up and processes running in them (no
    `finally` runs); sweeping its namespaces (this fixture's finalizer) kills every process
    in them and removes them all."""
    argv = [
        sys.executable,
        "-m",
        "lifeboat_dr.flows.drills.partition.drill",
        "--tag",
        tag,
        "--workdir",
        str(tmp_path),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    deadline, pids = time.monotonic() + 60, []
    try:
        while time.monotonic() < deadline and not pids:
            time.sleep(0.5)
            if len(leftovers(tag)) == 4:
                pids = _pids(f"{tag}-p")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert pids, "the drill never started its primary site"
    assert len(leftovers(tag)) == 4  # left behind by the kill
    _kill_namespace_processes(tag)
    assert leftovers(tag) == []
    time.sleep(0.5)
    assert not [p for p in pids if _alive(p)]


def _alive(pid: str) -> bool:
    """Running (a zombie waiting for its new parent to reap it is dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _pids(ns: str) -> list[str]:
    return subprocess.run(
        ["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=10
    ).stdout.split()
