"""README "Deploying", pasted as a new user would: its commands run verbatim against a real
`prefect server start` on PostgreSQL, as production runs it (on SQLite, CI's two busy cores
kept the database locked past the client's retries: 503 to the worker, the run Crashed), and real
process workers (the control plane's pool and the secondary
site's), then both vantages' `watch` and a dry-run `failover` run through them. The git server
is a bare clone of this checkout on loopback (`file://`), and the workers run in a folder of
their own: each run clones the deployed commit and works there, never in the checkout."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.flow_run_processes import kill_flow_runs_on

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def readme_deploy_commands() -> list[str]:
    """The shell lines of the first ```sh block under README's "## Deploying", comments cut."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Deploying", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def _console_script(tmp_path: Path) -> Path:
    """`lifeboat` as `pip install` writes it from pyproject's [project.scripts] entry (the
    shared venv's copy may predate this checkout's entry point)."""
    import tomllib

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["lifeboat"]
    module, func = target.split(":")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "lifeboat"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\nsys.exit({func}())\n")
    script.chmod(0o755)
    return bindir


def _env(api_url: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{_console_script(tmp_path)}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "PREFECT_API_URL": api_url,
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PREFECT_WORKER_PREFETCH_SECONDS": "1",
        "LIFEBOAT_STATE_DIR": str(tmp_path / "detect"),
        "LIFEBOAT_LEDGER": str(tmp_path / "ledger.jsonl"),
        "LIFEBOAT_GIT_CACHE": str(tmp_path / "git-mirrors"),  # the worker hosts' mirror of the git server
        # the failover the automation may start holds the demo's lock while it waits for a
        # person; killed at the end, its hold lapses 3 s later, not a minute (tests/checkout.py)
        "LIFEBOAT_LOCK_LEASE": "3",
    }


@pytest.fixture(scope="module")
def prefect_on_postgres(postgres_url):
    """This file's own `prefect server start`, on a database of its own in the suite's cluster."""
    from lifeboat_dr.testing.prefect_servers import postgres_database, prefect_server

    with prefect_server(postgres_database(postgres_url, "readme_deploy")) as url:
        yield url


def _wait_final(client, run_id, timeout: float = 180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.read_flow_run(run_id)
        if run.state is not None and run.state.is_final():
            return run
        time.sleep(1)
    pytest.fail(f"flow run {run_id} did not finish in {timeout:.0f}s (last state {run.state_name})")


def test_readme_lists_the_deploy_commands_a_new_user_runs():
    commands = readme_deploy_commands()
    beat = "PREFECT_FLOWS_HEARTBEAT_FREQUENCY=30"  # the workers' own: the pools let no run set env
    assert [c.split()[0] for c in commands] == ["export", "lifeboat", beat, beat]
    assert all(c.split()[1:3] == ["prefect", "worker"] for c in commands[2:])
    assert commands[1].startswith("lifeboat deploy ")
    assert commands[2].split()[-2:] == ["--pool", "lifeboat"]
    assert commands[3].split()[-2:] == ["--pool", "lifeboat-secondary"]


@pytest.mark.processes
def test_deploy_refuses_a_runbook_it_cannot_read_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "lifeboat_dr", "deploy", str(tmp_path / "missing.yaml")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "missing.yaml" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_readme_deploy_runs_watch_and_a_dry_run_failover_through_a_real_worker(prefect_on_postgres, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from lifeboat_dr.core.ledger import LedgerFile
    from lifeboat_dr.providers.orchestrator.prefect_api import CRASH_AUTOMATION, RERUN_AUTOMATION

    env = _env(prefect_on_postgres, tmp_path)
    export, deploy, *worker_cmds = readme_deploy_commands()
    assert export.startswith("export PREFECT_API_URL=")  # the test's own server stands in for it
    # the user's git server: a bare clone on loopback stands in for the README's URL
    git_server = tmp_path / "lifeboat.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(ROOT), str(git_server)], check=True)
    words = shlex.split(deploy)
    words[words.index("--repository") + 1] = f"file://{git_server}"
    deploy = shlex.join(words)
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout
    worker_host = tmp_path / "worker-host"  # no checkout here
    worker_host.mkdir()
    for _ in range(2):  # twice: the second run updates in place
        started = time.monotonic()
        done = subprocess.run(deploy, shell=True, cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        print(f"{deploy}: {time.monotonic() - started:.1f}s")
    assert "deployment watch/demo" in done.stdout and "deployment watch/watch-secondary-demo" in done.stdout
    assert "work pool 'lifeboat-secondary'" in done.stdout

    workers = []
    for i, worker_cmd in enumerate(worker_cmds):
        with open(tmp_path / f"worker{i}.log", "w") as out:  # the child keeps its own copy of the file
            workers.append(
                subprocess.Popen(
                    ["env", *shlex.split(worker_cmd)],  # VAR=value prefect worker start ...
                    cwd=worker_host,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    try:
        with (
            temporary_settings({PREFECT_API_URL: prefect_on_postgres}),
            get_client(sync_client=True) as client,
        ):
            watch = client.read_deployment_by_name("watch/demo")
            assert watch.parameters == {"runbook": "runbooks/demo.yaml", "vantage": "control-plane"}
            # the code comes from the git server at the deployed commit, not from a folder here
            clone = {"repository": f"file://{git_server}", "commit_sha": head.strip()}
            assert watch.pull_steps == [{"lifeboat_dr.flows.pull.clone_pinned": clone}]
            assert str(ROOT) not in json.dumps(watch.pull_steps)
            assert watch.work_pool_name == "lifeboat"
            second = client.read_deployment_by_name("watch/watch-secondary-demo")
            assert second.parameters == {"runbook": "runbooks/demo.yaml", "vantage": "secondary"}
            assert second.work_pool_name == "lifeboat-secondary"
            # the demo's detection.window, which its RTO allows (tests/topology/test_cadences.py)
            assert [s.schedule.interval.total_seconds() for s in second.schedules] == [30]
            assert client.read_work_pool("lifeboat-secondary").type == "process"
            automations = [a for a in client.read_automations() if a.name == "failover-on-confirmed-outage"]
            assert len(automations) == 1, "deploying twice must leave one failover automation"
            names = [a.name for a in client.read_automations()]
            assert names.count(CRASH_AUTOMATION) == names.count(RERUN_AUTOMATION) == 1

            failover = client.read_deployment_by_name("failover/failover")
            runs = [
                client.create_flow_run_from_deployment(watch.id),
                client.create_flow_run_from_deployment(second.id),
                client.create_flow_run_from_deployment(
                    failover.id, parameters={"runbook": "runbooks/demo.yaml", "dry_run": True}
                ),
            ]
            started = time.monotonic()
            finished = [_wait_final(client, r.id, timeout=240) for r in runs]
            print(f"both watches and dry-run failover through the workers: {time.monotonic() - started:.1f}s")
            log = "".join((tmp_path / f"worker{i}.log").read_text() for i in range(len(workers)))
            for run in finished:
                assert run.state.is_completed(), f"{run.name}: {run.state.message}\n{log[-3000:]}"
            # the secondary's watch ran on the secondary's worker, not the control plane's
            assert finished[1].work_pool_name == "lifeboat-secondary"
            assert finished[0].work_pool_name == finished[2].work_pool_name == "lifeboat"

            # the git server goes down with the region: the next failover still runs, from the
            # mirror the earlier runs left on the worker host (flows/pull.py)
            git_server.rename(tmp_path / "git-server-gone")
            again = client.create_flow_run_from_deployment(
                failover.id, parameters={"runbook": "runbooks/demo.yaml", "dry_run": True}
            )
            run = _wait_final(client, again.id, timeout=240)
            log = "".join((tmp_path / f"worker{i}.log").read_text() for i in range(len(workers)))
            assert run.state.is_completed(), f"{run.name}: {run.state.message}\n{log[-3000:]}"
            said = [entry.message for entry in client.read_logs(LogFilter(flow_run_id={"any_": [again.id]}))]
            assert any("did not answer" in m and "from this host's copy" in m for m in said), said
        # both watches wrote their vantage's readings into the one shared signal log
        # (JSON lines, appended: core/detection/log.py)
        lines = (tmp_path / "detect" / "demo.jsonl").read_text().splitlines()
        readings = [record["reading"] for record in map(json.loads, lines) if "reading" in record]
        vantages = {r["evidence"].get("vantage") for r in readings}
        assert vantages == {"control-plane", "secondary"}
        entries = LedgerFile(tmp_path / "ledger.jsonl").read("demo")
        by_run = {e.run_id: e for e in entries}
        assert by_run.pop(str(runs[2].id)).outcome == "completed"
        assert by_run.pop(str(again.id)).outcome == "completed"
        # The watches found the demo's primary silent here, so the automation may have started
        # a real failover by now: it waits for a person, and nothing was fenced without one.
        for other in by_run.values():
            assert (other.outcome, other.drill) == ("in-progress", False)
            assert "approval_granted" not in other.phases and "fenced" not in other.phases
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        kill_flow_runs_on(prefect_on_postgres)  # a failover the automation started, waiting for a person
