"""`FakeSkyLauncher`: SkyPilot behind the `SkyLauncher` seam, with this machine as the cloud.

It stands where `SdkLauncher` calls a SkyPilot API server, so `SkyPilotCompute` runs over it
unchanged (task building, job bookkeeping, error mapping), and it does what SkyPilot 0.14.1
does, as read from its source (`sky/execution.py`, `sky/backends/cloud_vm_ray_backend.py`,
`sky/skylet/job_lib.py`):

- `launch` refuses a cluster name SkyPilot would (`InvalidClusterNameError`), provisions a
  new cluster or starts a STOPPED one again, and on an UP one provisions nothing and skips
  setup (`sky launch` short-circuits a cluster that matches). It syncs the workdir to the
  cluster's `sky_workdir` and submits setup and run as one job (setup detached, as SkyPilot
  does for clusters: SETTING_UP, then RUNNING); a task with neither submits nothing (None).
- `exec` syncs the workdir and submits `run` alone (no setup, no file mounts) to an UP
  cluster. Job ids count up per cluster from 1; jobs run one at a time in submission order
  (a training job takes every GPU of the cluster), the rest wait PENDING.
- `cancel` stops a job's whole process group (SIGTERM, then SIGKILL): CANCELLED; a finished
  or unknown job is left alone. `down` stops every job and forgets the cluster.
- `info` reports the latest job as `sky.job_status(cluster, None)` does, for UP clusters only;
  `logs` is that job's output, setup included ("" when no job was ever submitted).
- A job is `/bin/sh -c` of its setup and run in a process group of its own, cwd the synced
  workdir, with the task's envs and secrets and SkyPilot's `SKYPILOT_*` variables; it ends
  SUCCEEDED, FAILED (run exited non-zero), FAILED_SETUP, CANCELLED or FAILED_DRIVER (killed
  before run returned, as by a preemption).
- Errors are SkyPilot's own: `ClusterDoesNotExist`, `ClusterNotUpError`, and per infra (a
  prefix: `aws` covers `aws/us-west-2`) the scripted launch failures, `no_capacity`
  (`ResourcesUnavailableError`) and `errors`, which leave a half-made INIT record behind as a
  failed provisioning does.

Not faked: machines and bucket mounts (the job sees the mount path in its env, not the
data), more than one node (rank 0 runs alone), git workdirs and managed jobs. Every call is
recorded (`launched`, `execs`, `cancels`, `downs`) for tests of what Lifeboat asked for.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lifeboat_dr.providers.compute.base import is_blocked
from lifeboat_dr.providers.compute.local import job_environment, kill_group
from lifeboat_dr.providers.compute.skypilot import SkyClusterInfo

_SETUP_FAILED = "setup-exit-code"  # written when setup exits non-zero
_RUNNING = "running"  # written when setup is done and run starts
_EXIT = "exit-code"  # run's exit status, written when run returns
_ACTIVE = ("SETTING_UP", "RUNNING")
_UNFINISHED = ("PENDING", *_ACTIVE)


@dataclass
class _Job:
    job_id: int
    home: Path  # run.log and the marker files
    script: str
    has_setup: bool
    env: dict[str, str]
    cwd: Path
    proc: subprocess.Popen | None = None  # None: still queued
    ended: str | None = None  # a status forced on it: CANCELLED, or FAILED_DRIVER (machine lost)

    @property
    def status(self) -> str:
        """The sky JobStatus name, read from the process and its marker files."""
        if self.ended:
            return self.ended
        if self.proc is None:
            return "PENDING"
        if self.proc.poll() is None:
            ran = not self.has_setup or (self.home / _RUNNING).exists()
            return "RUNNING" if ran else "SETTING_UP"
        if (self.home / _SETUP_FAILED).exists():
            return "FAILED_SETUP"
        try:
            code = int((self.home / _EXIT).read_text())
        except (FileNotFoundError, ValueError):
            return "FAILED_DRIVER"
        return "SUCCEEDED" if code == 0 else "FAILED"

    def start(self) -> None:
        with open(self.home / "run.log", "wb") as log:
            self.proc = subprocess.Popen(
                ["/bin/sh", "-c", self.script],
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def stop(self, *, hard: bool = False) -> None:
        """Stop the whole process group, and everything it left running: SIGTERM first, or
        `hard`, SIGKILL at once (a lost machine lets nothing clean up)."""
        if self.proc is None:
            return
        if hard:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        else:
            kill_group(self.proc.pid, self.proc)
        self.proc.wait()


@dataclass
class _Cluster:
    infra: str
    status: str  # sky ClusterStatus name: INIT, UP, STOPPED
    launched_at: float
    home: Path
    jobs: list[_Job] = field(default_factory=list)


class FakeSkyLauncher:
    """A `SkyLauncher` whose clusters are directories under `root` and whose jobs are local
    process groups. `no_capacity`: infras whose launches fail for lack of capacity;
    `errors`: infra -> the exception its launches raise."""

    def __init__(
        self,
        root: str | Path,
        *,
        no_capacity: Iterable[str] = (),
        errors: Mapping[str, BaseException] | None = None,
    ):
        self.root = Path(root).resolve()
        self.no_capacity = set(no_capacity)
        self.errors = dict(errors or {})
        self.launched: list[tuple[str, Any]] = []
        self.execs: list[tuple[str, Any]] = []
        self.cancels: list[tuple[str, int]] = []
        self.downs: list[str] = []
        self._clusters: dict[str, _Cluster] = {}

    def launch(self, task: Any, cluster: str) -> int | None:
        from sky.utils.common_utils import check_cluster_name_is_valid

        self.launched.append((cluster, task))
        check_cluster_name_is_valid(cluster)
        c = self._clusters.get(cluster)
        provisioned = c is None or c.status != "UP"
        if provisioned:
            infra = task_infra(task)
            if c is None:
                c = self._clusters[cluster] = _Cluster(infra, "INIT", time.time(), self.root / cluster)
            self._fail_if_scripted(infra)
            c.infra, c.status, c.launched_at = infra, "UP", time.time()
            c.home.mkdir(parents=True, exist_ok=True)
        self._sync_workdir(c, task)
        setup = task.setup if provisioned else None
        if task.run is None and setup is None:
            return None
        return self._submit(cluster, c, task, setup)

    def exec(self, task: Any, cluster: str) -> int | None:
        self.execs.append((cluster, task))
        c = self._up(cluster, "executing tasks")
        self._sync_workdir(c, task)
        return None if task.run is None else self._submit(cluster, c, task, None)

    def cancel(self, cluster: str, job_id: int) -> None:
        self.cancels.append((cluster, job_id))
        c = self._up(cluster, "cancelling jobs")
        for job in c.jobs:
            if job.job_id == job_id and job.status in _UNFINISHED:
                job.ended = "CANCELLED"
                job.stop()
        self._schedule(c)

    def info(self, cluster: str) -> SkyClusterInfo | None:
        c = self._clusters.get(cluster)
        if c is None:
            return None
        if c.status != "UP":
            return SkyClusterInfo(c.status, None, c.infra, c.launched_at, None)
        self._schedule(c)
        last = c.jobs[-1] if c.jobs else None
        return SkyClusterInfo(
            "UP", last.status if last else None, c.infra, c.launched_at, last.job_id if last else None
        )

    def logs(self, cluster: str, job_id: int | None) -> str:
        c = self._up(cluster, "tailing logs")
        self._schedule(c)
        if job_id is None and not c.jobs:
            return ""  # SkyPilot: "Skip streaming logs as no job has been submitted."
        job = c.jobs[-1] if job_id is None else next((j for j in c.jobs if j.job_id == job_id), None)
        if job is None:
            return f"Job {job_id} not found (see `sky queue`).\n"
        log = job.home / "run.log"
        return log.read_text(errors="replace") if log.exists() else ""

    def queue(self, cluster: str) -> list[tuple[int, str]]:
        """`sky queue`: every job's id and status, oldest first."""
        c = self._up(cluster, "getting the job queue")
        self._schedule(c)
        return [(j.job_id, j.status) for j in c.jobs]

    def down(self, cluster: str) -> None:
        self.downs.append(cluster)
        c = self._clusters.pop(cluster, None)
        if c is None:
            return
        for job in c.jobs:
            job.stop()
        shutil.rmtree(c.home, ignore_errors=True)

    def clusters(self) -> list[str]:
        return list(self._clusters)

    def preempt(self, cluster: str) -> None:
        """Reclaim the cluster's (spot) machines: every job's group is SIGKILLed mid-step and
        the cluster reads STOPPED, as SkyPilot's status refresh shows a preempted one."""
        from sky import exceptions

        c = self._clusters.get(cluster)
        if c is None:
            raise exceptions.ClusterDoesNotExist(f"Cluster {cluster!r} does not exist.")
        for job in c.jobs:
            if job.status in _UNFINISHED:
                job.ended = "FAILED_DRIVER"  # what the skylet marks them once the cluster is back
            job.stop(hard=True)
        c.status = "STOPPED"

    def _fail_if_scripted(self, infra: str) -> None:
        from sky import exceptions

        for key, error in self.errors.items():
            if is_blocked(infra, [key]):
                raise error
        if any(is_blocked(infra, [key]) for key in self.no_capacity):
            raise exceptions.ResourcesUnavailableError(
                f"Failed to acquire resources in {infra} (InsufficientInstanceCapacity)"
            )

    def _up(self, cluster: str, operation: str) -> _Cluster:
        """The cluster, if UP; SkyPilot's `check_cluster_available` errors otherwise."""
        from sky import exceptions
        from sky.utils import status_lib

        c = self._clusters.get(cluster)
        if c is None:
            raise exceptions.ClusterDoesNotExist(f"Cluster {cluster!r} does not exist.")
        if c.status != "UP":
            raise exceptions.ClusterNotUpError(
                f"{operation.capitalize()}: skipped for cluster {cluster!r} (status: {c.status}).",
                cluster_status=status_lib.ClusterStatus[c.status],
            )
        return c

    def _sync_workdir(self, c: _Cluster, task: Any) -> None:
        if task.workdir is None:
            return
        if not isinstance(task.workdir, str):
            from sky import exceptions

            raise exceptions.NotSupportedError("the fake SkyPilot launcher syncs local workdirs only")
        shutil.copytree(task.workdir, c.home / "sky_workdir", dirs_exist_ok=True)

    def _submit(self, cluster: str, c: _Cluster, task: Any, setup: str | None) -> int:
        job_id = len(c.jobs) + 1
        home = c.home / "jobs" / str(job_id)
        home.mkdir(parents=True)
        workdir = c.home / "sky_workdir"
        envs = {k: _plain(v) for k, v in task.envs_and_secrets.items()}
        envs |= {
            "SKYPILOT_TASK_ID": f"sky-fake_{cluster}_{job_id}",
            "SKYPILOT_NODE_RANK": "0",
            "SKYPILOT_NUM_NODES": "1",
            "SKYPILOT_NODE_IPS": "127.0.0.1",
        }
        c.jobs.append(
            _Job(
                job_id=job_id,
                home=home,
                script=_script(home, setup, task.run),
                has_setup=bool(setup),
                env=job_environment(envs),
                cwd=workdir if workdir.is_dir() else c.home,
            )
        )
        self._schedule(c)
        return job_id

    @staticmethod
    def _schedule(c: _Cluster) -> None:
        """Start the oldest queued job once no other job is setting up or running."""
        if any(j.status in _ACTIVE for j in c.jobs):
            return
        queued = next((j for j in c.jobs if j.status == "PENDING"), None)
        if queued is not None:
            queued.start()


def task_infra(task: Any) -> str:
    """`cloud/region` of the task's (first) resources, as the candidate set it: `aws/us-west-2`."""
    res = next(iter(task.resources))
    return "/".join(p for p in (str(res.infra.cloud or "").lower(), res.infra.region) if p)


def _plain(value: Any) -> str:
    """An env value, a secret's included (SkyPilot hands secrets to the job in clear)."""
    return value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)


def _script(home: Path, setup: str | None, run: str | None) -> str:
    """Setup, then run, in one shell; marker files tell `_Job.status` how far it got."""

    def mark(name: str, value: str) -> str:
        return f"echo {value} > {shlex.quote(str(home / name))}"

    lines = []
    if setup:
        lines += [
            "(",
            setup,
            ")",
            "rc=$?",
            f"if [ $rc -ne 0 ]; then {mark(_SETUP_FAILED, '$rc')}; exit $rc; fi",
        ]
    lines.append(mark(_RUNNING, "1"))
    lines += ["(", run, ")", mark(_EXIT, "$?")] if run else [mark(_EXIT, "0")]
    return "\n".join(lines)
