"""`local`: the job's command as a local process group. See base.py.

A cluster is a state directory `<root>/<cluster>/` (state.json, job.log, exit code) plus the
process group of `sh -c '<command>'`; a cluster launched without a job is the directory
alone (state.json with `"pid": null`), and `run` spawns the group into it. State lives on disk, so another process (a CLI, a
re-run flow) sees and tears down clusters it did not start. Teardown kills the whole group:
a trainer's children die with it, which is what a preempted VM would do.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

from lifeboat_dr.kernel.errors import ConfigError, NotFound
from lifeboat_dr.providers.compute.base import (
    ClusterState,
    ClusterStatus,
    JobSpec,
    JobState,
    PlanOption,
    is_blocked,
)

_EXIT = "exit-code"


class LocalCompute:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self._children: dict[str, subprocess.Popen] = {}  # reaped by us, so no zombies linger

    def _dir(self, cluster: str) -> Path:
        if not cluster or "/" in cluster or cluster.startswith("."):
            raise ConfigError(f"{cluster!r} is not a cluster name")
        return self.root / cluster

    def plan(self, candidates: Sequence[PlanOption], blocked: Sequence[str] = ()) -> list[PlanOption]:
        out = []
        for c in candidates:
            if is_blocked(c.infra, blocked):
                out.append(replace(c, feasible=False, reason=f"{c.infra} is blocked"))
            elif c.infra != "local":
                out.append(replace(c, feasible=False, reason="the local provider runs only infra `local`"))
            else:
                out.append(replace(c, feasible=True, reason="", hourly_usd=0.0))
        return sorted(out, key=lambda o: (not o.feasible, o.rank))

    def launch(self, cluster: str, option: PlanOption, job: JobSpec | None = None) -> ClusterStatus:
        _need_command(job)
        d = self._dir(cluster)
        if (d / "state.json").exists():
            st = self.status(cluster)
            if st.state is ClusterState.UP:
                return self.run(cluster, job) if job is not None and st.job is JobState.IDLE else st
            self.teardown(cluster)  # a dead leftover: start afresh
        d.mkdir(parents=True, exist_ok=True)
        self._write_state(d, {"pid": None, "option": asdict(option), "launched_at": _now()})
        return self.status(cluster) if job is None else self.run(cluster, job)

    def run(self, cluster: str, job: JobSpec) -> ClusterStatus:
        _need_command(job)
        d = self._dir(cluster)
        state = self._state(cluster)
        child = self._children.pop(cluster, None)
        if state.get("pid") is not None:  # a restart: the old job's whole group goes first
            kill_group(state["pid"], child)
        if child is not None:
            child.wait()
        self._spawn(cluster, d, state, job)
        return self.status(cluster)

    def _spawn(self, cluster: str, d: Path, state: dict, job: JobSpec) -> None:
        """Start `job` as a new process group with a fresh job.log, and record its pid."""
        exit_file = d / _EXIT
        exit_file.unlink(missing_ok=True)
        command = job.command + job.resume_suffix()
        # The wrapping shell records the exit code only when the command returns, so a
        # SIGKILLed group leaves no exit file: a failed job, as on a lost VM.
        script = f"(\n{command}\n)\necho $? > {shlex.quote(str(exit_file))}"
        env = job_environment({**job.resume_envs(), "LIFEBOAT_CLUSTER": cluster})
        with open(d / "job.log", "wb") as log:  # `logs` shows the job started last
            proc = subprocess.Popen(
                ["/bin/sh", "-c", script],
                cwd=job.workdir or None,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: teardown kills all of it
            )
        self._children[cluster] = proc
        self._write_state(d, {**state, "pid": proc.pid, "command": command, "started_at": _now()})

    @staticmethod
    def _write_state(d: Path, state: dict) -> None:
        tmp = d / "state.json.tmp"
        tmp.write_text(json.dumps(state))
        tmp.replace(d / "state.json")

    def _state(self, cluster: str) -> dict:
        try:
            return json.loads((self._dir(cluster) / "state.json").read_text())
        except FileNotFoundError:
            raise NotFound(f"local cluster {cluster!r} does not exist") from None

    def _alive(self, cluster: str, pid: int) -> bool:
        child = self._children.get(cluster)
        if child is not None and child.pid == pid:
            return child.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # a zombie whose parent has not reaped it has finished
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
        except (OSError, IndexError):
            return True

    def status(self, cluster: str) -> ClusterStatus:
        d = self._dir(cluster)
        state = self._state(cluster)
        option = PlanOption(**state["option"])
        launched = datetime.fromisoformat(state["launched_at"])
        pid = state.get("pid")
        returncode = None
        if pid is None:
            job = JobState.IDLE
        elif self._alive(cluster, pid):
            job = JobState.RUNNING
        else:
            try:
                returncode = int((d / _EXIT).read_text())
                job = JobState.SUCCEEDED if returncode == 0 else JobState.FAILED
            except (FileNotFoundError, ValueError):
                job = JobState.FAILED  # killed before the shell could record an exit code
        return ClusterStatus(
            name=cluster,
            state=ClusterState.UP,
            option=option,
            job=job,
            launched_at=launched,
            returncode=returncode,
            detail=f"pid {pid}" if pid is not None else "idle",
        )

    def logs(self, cluster: str) -> str:
        self._state(cluster)
        path = self._dir(cluster) / "job.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def preempt(self, cluster: str) -> None:
        """SIGKILL the job's whole process group, as a lost VM would: nothing gets to clean up."""
        pid = self._state(cluster).get("pid")
        if pid is None:
            return  # nothing runs on an idle local "cluster"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        child = self._children.get(cluster)
        if child is not None:
            child.wait()

    def teardown(self, cluster: str) -> None:
        d = self._dir(cluster)
        try:
            pid = json.loads((d / "state.json").read_text()).get("pid")
        except (FileNotFoundError, ValueError, AttributeError):
            pid = None
        child = self._children.pop(cluster, None)
        if pid is not None:
            kill_group(pid, child)
        if child is not None:
            child.wait()
        shutil.rmtree(d, ignore_errors=True)

    def clusters(self) -> list[str]:
        if not self.root.exists():
            return []
        return sorted(p.parent.name for p in self.root.glob("*/state.json"))


def _now() -> str:
    return datetime.now(UTC).isoformat()


def job_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment plus `extra`, with Lifeboat's interpreter first on PATH:
    `python` in a job's command is its venv's, as on a VM whose image has the job's
    environment first on PATH."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return {**os.environ, **extra, "PATH": path}


def _need_command(job: JobSpec | None) -> None:
    if job is not None and not job.command:
        raise ConfigError("the local provider runs job.command, which is missing")


def kill_group(pid: int, child: subprocess.Popen | None, grace: float = 2.0) -> None:
    """SIGTERM the group, then SIGKILL whatever is still there after `grace` seconds."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if child is not None:
            child.poll()  # reap our own leader
        if not group_alive(pid):
            return
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs. Orphaned members turn into zombies that
    only init reaps, and `killpg(pgid, 0)` counts those: read /proc where there is one."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
