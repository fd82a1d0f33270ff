"""The processes a Prefect process worker starts for its flow runs, found by their environment.

A process worker starts each flow run in a session of its own, so killing the worker's process
group leaves the run's process behind: a failover waiting for a person keeps its runbook's lock
renewed for as long as it waits. Tests that start workers end with `kill_flow_runs_on(api)`.
A flow run a test starts in a child Python prints its outcome as `RESULT <json>` (`printed_result`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path


def _with_env(needle: bytes) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if needle in (proc / "environ").read_bytes().split(b"\0"):
                    pids.append(int(proc.name))
            except OSError:  # gone, or not ours to read
                continue
    return pids


def flow_run_process(run_id: str) -> int | None:
    """The pid of the process running flow run `run_id` (the worker passes PREFECT__FLOW_RUN_ID)."""
    pids = _with_env(f"PREFECT__FLOW_RUN_ID={run_id}".encode())
    return pids[0] if pids else None


def kill_flow_runs_on(api_url: str) -> list[int]:
    """SIGKILL every flow-run process talking to `api_url` (a test's own server); their pids."""
    pids = [p for p in _with_env(f"PREFECT_API_URL={api_url}".encode()) if _is_flow_run(p)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _is_flow_run(pid: int) -> bool:
    try:
        return any(
            v.startswith(b"PREFECT__FLOW_RUN_ID=")
            for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        )
    except OSError:
        return False


def printed_result(out: str) -> dict | None:
    """The outcome a child Python printed as its `RESULT <json>` line, or None if it printed none."""
    line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
    return json.loads(line.removeprefix("RESULT ")) if line else None
