"""Prefect's API is down (a port nothing listens on): every command that needs it says so in
one line naming the URL and exits 75 (EX_TEMPFAIL: try again), never a traceback; `validate`
warns in one line and still validates."""

import os
import subprocess
import sys

import pytest

from lifeboat_dr.testing.prefect_servers import free_port

NEEDS_PREFECT = [
    ["failover", "demo", "--dry-run"],
    ["failover", "demo", "--dry-run", "--json"],
    ["failback", "demo"],
    ["fleet-failover", "demo", "--dry-run", "--json"],
    ["approve", "11111111-2222-3333-4444-555555555555", "--reason", "restore"],
    ["deploy", "demo"],
    ["drill", "demo", "--kind", "process-kill"],
    ["audit", "demo"],
]


@pytest.fixture(scope="module")
def dead_api():
    return f"http://127.0.0.1:{free_port()}/api"


def lifeboat(args, api, cwd):
    env = {**os.environ, "PREFECT_API_URL": api, "LIFEBOAT_LEDGER": str(cwd / "ledger.jsonl")}
    return subprocess.run(
        [sys.executable, "-m", "lifeboat_dr", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.processes
@pytest.mark.parametrize("args", NEEDS_PREFECT, ids=" ".join)
def test_prefect_down_is_one_line_naming_the_url(args, dead_api, tmp_path):
    done = lifeboat(args, dead_api, tmp_path)
    out = (done.stdout + done.stderr).strip().splitlines()
    assert out == [
        f"lifeboat {args[0]}: Prefect API at {dead_api} did not answer: ConnectError: "
        "[Errno 111] Connection refused"
    ], "\n".join(out[-20:])
    assert done.returncode == 75


@pytest.mark.processes
def test_validate_with_prefect_down_warns_in_one_line_and_validates(dead_api, tmp_path):
    done = lifeboat(["validate", "demo"], dead_api, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert f"warning: could not read the work pools: Prefect API at {dead_api} did not answer" in done.stderr


@pytest.mark.parametrize("call", ["ensure_process_pool", "pool_warnings", "ensure_crash_recovery"])
def test_the_pool_and_automation_calls_raise_the_retryable_error_not_type_error(call, dead_api):
    """The nested-tuple sites (`except (OSError, _http_errors())`): Prefect down raised TypeError."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from lifeboat_dr.kernel.errors import ProviderUnavailable
    from lifeboat_dr.providers.orchestrator import prefect_api

    with temporary_settings({PREFECT_API_URL: dead_api}):
        if call == "pool_warnings":
            [line] = prefect_api.pool_warnings(["lifeboat"])
            assert line.startswith(f"could not read the work pools: Prefect API at {dead_api} did not answer")
            return
        with pytest.raises(ProviderUnavailable, match=f"Prefect API at {dead_api} did not answer") as raised:
            getattr(prefect_api, call)("lifeboat" if call == "ensure_process_pool" else "failover")
        assert raised.value.exit_code == 75  # EX_TEMPFAIL: a command exits "try again"


@pytest.mark.processes
def test_a_temporary_server_that_never_comes_up_is_one_line(tmp_path):
    """PREFECT_API_URL unset: Prefect starts a temporary server of its own, and on a loaded
    machine it can miss its startup deadline (20 s by default; 1 s here): a RuntimeError from Prefect's
    client, 45 lines of traceback before. One line saying what to set, exit 75."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PREFECT_API_URL", "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE")
    }
    env.update(
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="1", LIFEBOAT_LEDGER=str(tmp_path / "l.jsonl")
    )
    done = subprocess.run(
        [sys.executable, "-m", "lifeboat_dr", "failover", "demo", "--dry-run", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("lifeboat failover:")]
    assert done.returncode == 75 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(lines) == 1 and "set PREFECT_API_URL to a running server" in lines[0], done.stderr
