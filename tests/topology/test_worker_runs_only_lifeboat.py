"""A Lifeboat worker runs only Lifeboat (#26): whoever can create a flow run chooses its job
variables, and Prefect's default process template lets them replace the command, the
environment and the working directory of the process the worker starts. The pools
`lifeboat deploy` creates fix all three; `deploy` and `validate` warn about a pool that does
not. On a real `prefect server start` with a real process worker."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lifeboat_dr.providers.orchestrator.prefect_api import ensure_process_pool
from lifeboat_dr.shell.cli import main
from tests.flow_run_processes import kill_flow_runs_on

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
POOL = "lifeboat-locked"


@contextlib.contextmanager
def api_at(url: str):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: url}):
        yield


def deploy_failover(client, pool: str) -> str:
    """The `failover` deployment on `pool`, as `lifeboat deploy` writes it (entrypoint by module)."""
    flow_id = client.create_flow_from_name("failover")
    return client.create_deployment(
        flow_id,
        f"failover-{pool}",
        entrypoint="lifeboat_dr.flows.failover:failover",
        work_pool_name=pool,
        pull_steps=[],
        enforce_parameter_schema=False,
    )


@contextlib.contextmanager
def worker(api: str, pool: str, log: Path):
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "PREFECT_API_URL": api,
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_WORKER_PREFETCH_SECONDS": "1",
    }
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(BIN / "prefect"), "worker", "start", "--pool", pool, "--name", f"{pool}-worker"],
            cwd=log.parent,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        kill_flow_runs_on(api)


def final_state(client, run_id, pwned: Path, what: str, timeout: float = 240):
    """The run's final state; fails at once when the worker did what the run asked instead."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert not pwned.exists(), f"{what}: the worker ran the run's own {what}: {pwned.read_text()!r}"
        state = client.read_flow_run(run_id).state
        if state is not None and state.is_final():
            return state
        time.sleep(1)
    pytest.fail(f"{what}: flow run {run_id} did not finish within {timeout:.0f}s")


def attack(kind: str, folder: Path) -> tuple[dict, Path]:
    """The job variables of one attack, and the file it writes if the worker obeys it."""
    pwned = folder / f"pwned-{kind}"
    if kind == "command":  # what the issue saw: copy the key out of the worker's environment
        return {"command": f"sh -c 'echo key=$LIFEBOAT_APPROVAL_KEY > {pwned}'"}, pwned
    if kind == "env":  # a sitecustomize on PYTHONPATH runs in every Python the worker starts
        (folder / "evil-env").mkdir()
        (folder / "evil-env" / "sitecustomize.py").write_text(f"open({str(pwned)!r}, 'w').write('env')\n")
        return {"env": {"PYTHONPATH": str(folder / "evil-env")}}, pwned
    # a folder whose `prefect` package shadows Prefect's for `python -m prefect...` started there
    (folder / "evil-dir" / "prefect").mkdir(parents=True)
    (folder / "evil-dir" / "prefect" / "__init__.py").write_text(f"open({str(pwned)!r}, 'w').write('dir')\n")
    return {"working_dir": str(folder / "evil-dir")}, pwned


@pytest.fixture(scope="module")
def locked_worker(prefect_server_process, tmp_path_factory):
    """A pool as `lifeboat deploy` creates it, the failover deployment on it, a process worker."""
    from prefect.client.orchestration import get_client

    api, folder = prefect_server_process, tmp_path_factory.mktemp("locked-worker")
    with api_at(api):
        ensure_process_pool(POOL)
        with get_client(sync_client=True) as client:
            deployment = deploy_failover(client, POOL)
        with worker(api, POOL, folder / "worker.log"):
            yield deployment


@pytest.mark.parametrize("kind", ["command", "env", "working_dir"])
def test_a_run_carrying_job_variables_runs_nothing_of_them(locked_worker, tmp_path, kind):
    from prefect.client.orchestration import get_client

    job_variables, pwned = attack(kind, tmp_path)
    with get_client(sync_client=True) as client:
        run = client.create_flow_run_from_deployment(
            locked_worker,
            parameters={"runbook": str(tmp_path / "no-such-runbook.yaml")},
            job_variables=job_variables,
        )
        state = final_state(client, run.id, pwned, kind)

    # Lifeboat's own flow ran, and refused the missing runbook in one line
    assert state.is_failed() and "no such file" in (state.message or ""), state


def test_deploy_and_validate_warn_about_a_pool_a_run_can_override(
    prefect_server_process, tmp_path, capsys, monkeypatch
):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.workers.process import ProcessWorker

    from lifeboat_dr.providers.orchestrator.prefect_api import overridable_fields

    monkeypatch.setenv("PREFECT_API_URL", prefect_server_process)  # validate checks the pools then
    with api_at(prefect_server_process), get_client(sync_client=True) as client:
        client.create_work_pool(
            WorkPoolCreate(
                name="open-pool",
                type="process",
                base_job_template=ProcessWorker.get_default_base_job_template(),
            )
        )
        deploy_failover(client, "open-pool")
        assert overridable_fields(client.read_work_pool("open-pool").base_job_template) == [
            "command",
            "env",
            "working_dir",
        ]

        assert ensure_process_pool("open-pool") == "exists"  # left as the operator made it
        assert main(["validate", "demo"]) == 0
    err = capsys.readouterr().err
    assert "work pool 'open-pool' lets a run set its command, env, working_dir" in err, err


def test_the_pool_lifeboat_deploy_creates_lets_a_run_set_none_of_them(
    prefect_server_process, capsys, monkeypatch
):
    from prefect.client.orchestration import get_client

    from lifeboat_dr.providers.orchestrator.prefect_api import overridable_fields

    monkeypatch.setenv("PREFECT_API_URL", prefect_server_process)
    with api_at(prefect_server_process), get_client(sync_client=True) as client:
        assert ensure_process_pool("made-by-deploy") == "created"
        assert overridable_fields(client.read_work_pool("made-by-deploy").base_job_template) == []
        deploy_failover(client, "made-by-deploy")
        assert main(["validate", "demo"]) == 0
    assert "made-by-deploy" not in capsys.readouterr().err
