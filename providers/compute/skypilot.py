"""`skypilot`: the user's SkyPilot task on the secondary's candidates. See base.py.

Planning runs SkyPilot's optimizer in process (`skyplan.py`). Launching sits behind a small
`SkyLauncher` seam: `SdkLauncher` calls the SkyPilot SDK (an API server; real clouds), tests
inject `FakeSkyLauncher` (skyfake.py), which records the built `sky.Task`, runs its setup and
run as local processes and raises SkyPilot's own exceptions, so the task building, job
bookkeeping and error mapping here are the code that runs in production, under the same
compute contract as the other backends. Nothing in the test suite launches a machine.

Provisioning apart from the job: `launch` without a job launches the user's task with its
`run:` removed (setup, workdir and file mounts kept, the secondary store mounted), because
`sky exec` later skips setup and file mounts; without a task YAML it is the resources alone.
`run` is `sky exec` of the task on that cluster, after cancelling a job still running there.
SkyPilot runs setup as a job of its own: this process remembers that job id, so the cluster
reads `IDLE` once setup succeeded; another process sees it as a finished job.

Managed-job mode (`managed=True`) hands the task to SkyPilot's jobs controller with
`job_recovery` set, so SkyPilot itself relaunches a preempted spot job; the cluster name
becomes the managed job's name. A managed job is provisioned and run as one: `launch`
without a job and `run` raise `ConfigError` there.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from lifeboat_dr.kernel.errors import ConfigError, NotFound, PreconditionFailed, ProviderUnavailable
from lifeboat_dr.providers.compute.base import (
    ClusterState,
    ClusterStatus,
    JobSpec,
    JobState,
    PlanOption,
)
from lifeboat_dr.providers.compute.skyerrors import launch_error
from lifeboat_dr.providers.compute.skyplan import (
    SHIPPED_CATALOG,
    import_sky,
    offline_clouds,
    optimize,
    use_offline_catalog,
)
from lifeboat_dr.runbooks.skytask import (
    config_for,
    mount_secondary,
    read_task,
    rewrite_store_refs,
    strip_location,
)

_CLUSTER_STATES = {
    "INIT": ClusterState.PROVISIONING,
    "UP": ClusterState.UP,
    "STOPPED": ClusterState.PREEMPTED,
    # managed jobs: the controller's view of the job stands for the cluster
    "PENDING": ClusterState.PROVISIONING,
    "STARTING": ClusterState.PROVISIONING,
    "RECOVERING": ClusterState.PROVISIONING,
    "RUNNING": ClusterState.UP,
}
_JOB_STATES = {
    "INIT": JobState.PENDING,
    "PENDING": JobState.PENDING,
    "SETTING_UP": JobState.PENDING,
    "STARTING": JobState.PENDING,
    "RECOVERING": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "SUCCEEDED": JobState.SUCCEEDED,
}


@dataclass(frozen=True)
class SkyClusterInfo:
    """What a launcher reports about one cluster (or managed job), in plain strings."""

    status: str  # sky ClusterStatus (INIT, UP, STOPPED) or ManagedJobStatus name
    job_status: str | None  # sky JobStatus name of the job on it (PENDING, RUNNING, SUCCEEDED, FAILED...)
    infra: str | None = None
    launched_at: float | None = None  # epoch seconds
    job_id: int | None = None


class SkyLauncher(Protocol):
    """The seam between Lifeboat and a SkyPilot API server. Raises SkyPilot's exceptions."""

    def launch(self, task: Any, cluster: str) -> int | None:
        """Provision and run `task` (a sky.Task) as `cluster`; returns the job id (None when
        the task has neither setup nor run: nothing was submitted)."""
        ...

    def exec(self, task: Any, cluster: str) -> int | None:
        """Run `task` on the existing, up `cluster` (`sky exec`); returns the job id."""
        ...

    def cancel(self, cluster: str, job_id: int) -> None:
        """Cancel one job on `cluster`; the cluster stays up."""
        ...

    def info(self, cluster: str) -> SkyClusterInfo | None:
        """The cluster's state, or None when SkyPilot does not know it."""
        ...

    def logs(self, cluster: str, job_id: int | None) -> str: ...

    def down(self, cluster: str) -> None:
        """Terminate the cluster (or cancel the managed job); a missing one is fine."""
        ...

    def clusters(self) -> list[str]: ...


Stage = Literal["launch", "provision", "exec"]


def build_task(
    job: JobSpec,
    option: PlanOption | None,
    *,
    job_recovery: Mapping[str, Any] | str | None = None,
    stage: Stage = "launch",
) -> Any:
    """The user's task YAML with the candidate's resources, the resume checkpoint and the
    secondary store mounted. The user's other resource fields (disk, cpus, ports) are kept.

    `stage="provision"`: no `run:` (the cluster only; a missing task YAML gives the
    resources alone). `stage="exec"`: no setup and no file mounts, which `sky exec` skips.
    `option=None` keeps the task's own resources (a cluster another process launched)."""
    sky = import_sky()
    if job.task_yaml is None and stage != "provision":
        raise ConfigError("the SkyPilot provider needs job.task (the task YAML)")
    config = adapt_task(job)
    if stage == "provision":
        config.pop("run", None)
    elif stage == "exec":
        config.pop("setup", None)
        config.pop("file_mounts", None)
    workdir = config.get("workdir")
    if isinstance(workdir, str) and not Path(workdir).expanduser().is_absolute():
        config["workdir"] = str((Path(job.task_yaml).parent / workdir).resolve())
    config["envs"] = {**(config.get("envs") or {}), **job.resume_envs()}
    if job.resume_arg and job.checkpoint:
        if not config.get("run"):
            raise ConfigError(f"{job.task_yaml}: job.resume.arg needs a `run:` command to append to")
        config["run"] = str(config["run"]).rstrip() + job.resume_suffix()
    config = mount_secondary(config, job.store_uri, files=stage != "exec")
    try:
        task = sky.Task.from_yaml_config(config)
    except ValueError as e:
        raise ConfigError(f"{job.task_yaml}: SkyPilot rejected the task: {e}") from None
    override: dict[str, Any] = {}
    if option is not None:
        override = {"infra": option.infra, "use_spot": option.use_spot}
        if option.accelerators:
            override["accelerators"] = option.accelerators
        if option.instance_type:
            override["instance_type"] = option.instance_type
    if job_recovery is not None:
        override["job_recovery"] = job_recovery
    if override:
        task.set_resources_override(override)
    if not task.name:
        task.name = job.name
    return task


def adapt_task(job: JobSpec) -> dict[str, Any]:
    """The task YAML as a mapping, made to run on the secondary: no pinned location (the
    candidate decides), and mounts/envs naming the primary store moved to the secondary.
    A reference that cannot be moved is a ConfigError naming its line (validate says so
    first: `lifeboat_dr.providers.compute.skycheck`)."""
    if job.task_yaml is None:
        return {}
    config = strip_location(config_for(job.task_yaml))
    shown = str(job.task_yaml)
    _, lines = read_task(job.task_yaml, shown)
    config, _, problems = rewrite_store_refs(
        config, job.primary_store_uri, job.store_uri, shown=shown, lines=lines
    )
    if problems:
        raise ConfigError("\n".join(str(p) for p in problems))
    return config


def task_defaults(task_yaml: Path) -> dict[str, Any]:
    """The `resources:` of a task YAML, for pricing candidates that leave fields to the task."""
    config = config_for(task_yaml)  # bounded, as the runbook is read
    res = config.get("resources") or {}
    if "any_of" in res or "ordered" in res or not isinstance(res, dict):
        return {}
    return dict(res)


def task_nodes(task_yaml: Path) -> int:
    """`num_nodes` of a task YAML (1 when absent): prices are per cluster, not per node."""
    return int(config_for(task_yaml).get("num_nodes") or 1)


class SkyPilotCompute:
    """`offline=True` plans over the shipped catalog (no network, no credentials);
    `offline=False` uses the user's SkyPilot setup. `launcher` defaults to the SDK."""

    def __init__(
        self,
        *,
        launcher: SkyLauncher | None = None,
        offline: bool = True,
        catalog: Path = SHIPPED_CATALOG,
        task_yaml: Path | None = None,
        num_nodes: int = 1,
        managed: bool = False,
        job_recovery: Mapping[str, Any] | str | None = None,
        store_uri: str | None = None,
        primary_store_uri: str | None = None,
        price_source: str = "",
    ):
        self.offline = offline
        self.task_yaml = task_yaml  # what `launch` without a job provisions (less its run:)
        self.store_uri = store_uri  # the secondary store, mounted when provisioning
        self.primary_store_uri = primary_store_uri  # task references to it move to store_uri
        self.price_source = price_source  # stamped on every priced option
        self.catalog = catalog
        self.defaults = task_defaults(task_yaml) if task_yaml else {}
        self.num_nodes = num_nodes
        self.managed = managed
        self.job_recovery = job_recovery if managed else None
        if managed and job_recovery is None:
            self.job_recovery = {"strategy": "FAILOVER", "max_restarts_on_errors": 3}
        self._launcher = launcher
        self._options: dict[str, PlanOption] = {}
        self._setup_jobs: dict[str, int | None] = {}  # clusters launched without a job
        if offline:
            use_offline_catalog(catalog)

    @property
    def launcher(self) -> SkyLauncher:
        if self._launcher is None:
            self._launcher = SdkLauncher(managed=self.managed)
        return self._launcher

    def plan(self, candidates: Sequence[PlanOption], blocked: Sequence[str] = ()) -> list[PlanOption]:
        if not self.offline:
            options = optimize(candidates, blocked, defaults=self.defaults, num_nodes=self.num_nodes)
        else:
            with offline_clouds(self.catalog):
                options = optimize(candidates, blocked, defaults=self.defaults, num_nodes=self.num_nodes)
        return [replace(o, price_source=self.price_source) if o.feasible else o for o in options]

    def launch(self, cluster: str, option: PlanOption, job: JobSpec | None = None) -> ClusterStatus:
        if job is None and self.managed:
            raise ConfigError("managed-job mode provisions and runs together: launch needs the job")
        info = self._info(cluster)
        if info is not None and _CLUSTER_STATES.get(info.status) in (
            ClusterState.PROVISIONING,
            ClusterState.UP,
        ):
            st = self.status(cluster)
            return self.run(cluster, job) if job is not None and st.job is JobState.IDLE else st
        if job is None:
            bare = JobSpec(
                name=cluster,
                task_yaml=self.task_yaml,
                store_uri=self.store_uri,
                primary_store_uri=self.primary_store_uri,
            )
            task = build_task(bare, option, stage="provision")
        else:
            task = build_task(job, option, job_recovery=self.job_recovery)
        try:
            job_id = self.launcher.launch(task, cluster)
        except Exception as e:
            self._down_quietly(cluster)  # a failed launch may leave INIT nodes or a record behind
            raise launch_error(option.infra, e) from e
        self._options[cluster] = option
        if job is None:
            self._setup_jobs[cluster] = job_id
        else:
            self._setup_jobs.pop(cluster, None)
        return self.status(cluster)

    def run(self, cluster: str, job: JobSpec) -> ClusterStatus:
        if self.managed:
            raise ConfigError("managed-job mode cannot run a job on an existing cluster: relaunch it")
        info = self._known(cluster)
        if _CLUSTER_STATES.get(info.status) is not ClusterState.UP:
            raise PreconditionFailed(f"SkyPilot cluster {cluster!r} is {info.status}, not UP")
        task = build_task(job, self._options.get(cluster), stage="exec")
        with _cluster_errors(cluster):
            running = _JOB_STATES.get(info.job_status or "", JobState.FAILED)
            is_setup = cluster in self._setup_jobs and info.job_id == self._setup_jobs[cluster]
            if info.job_id is not None and not running.finished and not is_setup:
                self.launcher.cancel(cluster, info.job_id)  # else sky exec would queue behind it
            self.launcher.exec(task, cluster)
        self._setup_jobs.pop(cluster, None)
        return self.status(cluster)

    def _info(self, cluster: str) -> SkyClusterInfo | None:
        try:
            return self.launcher.info(cluster)
        except (ConnectionError, TimeoutError) as e:
            raise ProviderUnavailable(f"SkyPilot status for {cluster}: {e}") from e

    def _known(self, cluster: str) -> SkyClusterInfo:
        info = self._info(cluster)
        if info is None:
            raise NotFound(f"SkyPilot cluster {cluster!r} does not exist")
        return info

    def _down_quietly(self, cluster: str) -> None:
        with contextlib.suppress(Exception):  # the launch error is what the caller must see
            self.launcher.down(cluster)

    def status(self, cluster: str) -> ClusterStatus:
        return self._status(cluster, self._known(cluster))

    def _status(self, cluster: str, info: SkyClusterInfo) -> ClusterStatus:
        option = self._options.get(cluster) or PlanOption(
            infra=info.infra or "unknown",
            instance_type=None,
            accelerators=None,
            use_spot=False,
            hourly_usd=None,
        )
        state = _CLUSTER_STATES.get(info.status, ClusterState.TERMINATED)
        job = _JOB_STATES.get(info.job_status or "PENDING", JobState.FAILED)
        if cluster in self._setup_jobs and info.job_id == self._setup_jobs[cluster]:
            # the setup job: idle once it succeeded, failed if it failed, pending until then
            if info.job_status in (None, "SUCCEEDED"):
                job = JobState.IDLE
            elif not job.finished:
                job = JobState.PENDING
        elif info.job_status is None and state is ClusterState.UP and not self.managed:
            job = JobState.IDLE  # up, and no job was ever submitted
        launched = datetime.fromtimestamp(info.launched_at or 0, UTC)
        return ClusterStatus(
            name=cluster,
            state=state,
            option=option,
            job=job,
            launched_at=launched,
            returncode=0 if job is JobState.SUCCEEDED else None,  # SkyPilot keeps no other exit code
            detail=f"sky {'managed job' if self.managed else 'job'} {info.job_id}",
        )

    def logs(self, cluster: str) -> str:
        info = self._known(cluster)
        if self._status(cluster, info).job is JobState.IDLE:
            return ""  # no job yet, or only the setup of a cluster held before approval
        with _cluster_errors(cluster):
            return self.launcher.logs(cluster, info.job_id)

    def teardown(self, cluster: str) -> None:
        self.launcher.down(cluster)
        self._options.pop(cluster, None)
        self._setup_jobs.pop(cluster, None)

    def clusters(self) -> list[str]:
        return sorted(self.launcher.clusters())


class SdkLauncher:
    """SkyPilot SDK calls (through its API server). Not exercised by the test suite: every
    call here provisions, inspects or terminates real cloud resources."""

    def __init__(self, *, managed: bool = False):
        self.managed = managed
        self.sky = import_sky()
        from sky import exceptions, jobs

        self.exceptions, self.jobs = exceptions, jobs

    def launch(self, task: Any, cluster: str) -> int | None:
        sky = self.sky
        if self.managed:
            job_ids, _ = sky.stream_and_get(self.jobs.launch(task, name=cluster))
            return job_ids[0] if job_ids else None
        job_id, _ = sky.stream_and_get(sky.launch(task, cluster_name=cluster, retry_until_up=False))
        return job_id

    def exec(self, task: Any, cluster: str) -> int | None:
        job_id, _ = self.sky.stream_and_get(self.sky.exec(task, cluster_name=cluster))
        return job_id

    def cancel(self, cluster: str, job_id: int) -> None:
        self.sky.get(self.sky.cancel(cluster, job_ids=[job_id]))

    def info(self, cluster: str) -> SkyClusterInfo | None:
        sky = self.sky
        if self.managed:
            records = [r for r in sky.get(self.jobs.queue(refresh=False)) if _get(r, "job_name") == cluster]
            if not records:
                return None
            r = max(records, key=lambda r: _get(r, "job_id") or 0)
            status = _name(_get(r, "status"))
            if status in (
                "SUCCEEDED",
                "FAILED",
                "FAILED_SETUP",
                "FAILED_PRECHECKS",
                "FAILED_NO_RESOURCE",
                "FAILED_CONTROLLER",
                "CANCELLED",
                "CANCELLING",
            ):
                return SkyClusterInfo(
                    "TERMINATED", status, _get(r, "infra"), _get(r, "submitted_at"), _get(r, "job_id")
                )
            return SkyClusterInfo(
                status, status, _get(r, "infra"), _get(r, "submitted_at"), _get(r, "job_id")
            )
        records = sky.get(sky.status(cluster_names=[cluster]))
        if not records:
            return None
        r = records[0]
        jobs = sky.get(sky.job_status(cluster, None)) if _name(_get(r, "status")) == "UP" else {}
        job_id, job_status = next(iter(jobs.items()), (None, None))
        return SkyClusterInfo(
            _name(_get(r, "status")),
            _name(job_status) if job_status else None,
            _get(r, "resources_str"),
            _get(r, "launched_at"),
            job_id,
        )

    def logs(self, cluster: str, job_id: int | None) -> str:
        sky, buf = self.sky, io.StringIO()
        if self.managed:
            self.jobs.tail_logs(name=cluster, follow=False, output_stream=buf)
        else:
            sky.tail_logs(cluster, job_id, follow=False, output_stream=buf)
        return buf.getvalue()

    def down(self, cluster: str) -> None:
        sky = self.sky
        try:
            if self.managed:
                sky.get(self.jobs.cancel(name=cluster))
            else:
                sky.get(sky.down(cluster))
        except self.exceptions.ClusterDoesNotExist:
            pass

    def clusters(self) -> list[str]:
        sky = self.sky
        if self.managed:
            return [_get(r, "job_name") for r in sky.get(self.jobs.queue(refresh=False, skip_finished=True))]
        return [_get(r, "name") for r in sky.get(sky.status())]


@contextlib.contextmanager
def _cluster_errors(cluster: str) -> Iterator[None]:
    """SkyPilot's errors for a call on an existing cluster, as Lifeboat's: the cluster went
    away (NotFound), is not up (PreconditionFailed), or the API server is unreachable."""
    from sky import exceptions

    try:
        yield
    except exceptions.ClusterDoesNotExist as e:
        raise NotFound(f"SkyPilot cluster {cluster!r} does not exist: {e}") from e
    except exceptions.ClusterNotUpError as e:
        raise PreconditionFailed(f"SkyPilot cluster {cluster!r} is not up: {e}") from e
    except (exceptions.ApiServerConnectionError, ConnectionError, TimeoutError) as e:
        raise ProviderUnavailable(f"SkyPilot API server unreachable: {e}") from e


def _get(record: Any, key: str) -> Any:
    return record.get(key) if isinstance(record, dict) else getattr(record, key, None)


def _name(value: Any) -> str:
    return getattr(value, "value", None) or getattr(value, "name", None) or str(value)
