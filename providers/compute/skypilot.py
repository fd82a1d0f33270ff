"""`skypilot`: the user's SkyPilot task on the secondary's candidates. See base.py.

Planning runs SkyPilot's optimizer in process (`skyplan.py`). Launching sits behind a small
`SkyLauncher` seam: `SdkLauncher` calls the SkyPilot SDK (an API server; real clouds), tests
inject a launcher that records the built `sky.Task` and raises SkyPilot's own
`ResourcesUnavailableError`, so the task building and error mapping here are the code that
runs in production. Nothing in the test suite launches a machine.

Managed-job mode (`managed=True`) hands the task to SkyPilot's jobs controller with
`job_recovery` set, so SkyPilot itself relaunches a preempted spot job; the cluster name
becomes the managed job's name.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import yaml

from lifeboat.errors import ConfigError, NotFound, ProviderUnavailable
from providers.compute.base import (
    CapacityError,
    ClusterState,
    ClusterStatus,
    JobSpec,
    JobState,
    PlanOption,
)
from providers.compute.skyplan import (
    SHIPPED_CATALOG,
    import_sky,
    offline_clouds,
    optimize,
    use_offline_catalog,
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
_MOUNTABLE = ("s3://", "gs://")


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
        """Provision and run `task` (a sky.Task) as `cluster`; returns the job id."""
        ...

    def info(self, cluster: str) -> SkyClusterInfo | None:
        """The cluster's state, or None when SkyPilot does not know it."""
        ...

    def logs(self, cluster: str, job_id: int | None) -> str: ...

    def down(self, cluster: str) -> None:
        """Terminate the cluster (or cancel the managed job); a missing one is fine."""
        ...

    def clusters(self) -> list[str]: ...


def build_task(
    job: JobSpec, option: PlanOption, *, job_recovery: Mapping[str, Any] | str | None = None
) -> Any:
    """The user's task YAML with the candidate's resources, the resume checkpoint and the
    secondary store mounted. The user's other resource fields (disk, cpus, ports) are kept."""
    sky = import_sky()
    if job.task_yaml is None:
        raise ConfigError("the SkyPilot provider needs job.task (the task YAML)")
    try:
        config = yaml.safe_load(Path(job.task_yaml).read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"{job.task_yaml}: task YAML not found") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{job.task_yaml}: not valid YAML: {e}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{job.task_yaml}: a SkyPilot task YAML is a mapping")
    workdir = config.get("workdir")
    if isinstance(workdir, str) and not Path(workdir).expanduser().is_absolute():
        config["workdir"] = str((Path(job.task_yaml).parent / workdir).resolve())
    config["envs"] = {**(config.get("envs") or {}), **job.resume_envs()}
    if job.resume_arg and job.checkpoint:
        if not config.get("run"):
            raise ConfigError(f"{job.task_yaml}: job.resume.arg needs a `run:` command to append to")
        config["run"] = str(config["run"]).rstrip() + job.resume_suffix()
    if job.store_uri and job.store_uri.startswith(_MOUNTABLE):
        mounts = dict(config.get("file_mounts") or {})
        mounts[job.store_mount] = {"source": job.store_uri, "mode": "MOUNT"}
        config["file_mounts"] = mounts
    try:
        task = sky.Task.from_yaml_config(config)
    except ValueError as e:
        raise ConfigError(f"{job.task_yaml}: SkyPilot rejected the task: {e}") from None
    override: dict[str, Any] = {"infra": option.infra, "use_spot": option.use_spot}
    if option.accelerators:
        override["accelerators"] = option.accelerators
    if option.instance_type:
        override["instance_type"] = option.instance_type
    if job_recovery is not None:
        override["job_recovery"] = job_recovery
    task.set_resources_override(override)
    if not task.name:
        task.name = job.name
    return task


def task_defaults(task_yaml: Path) -> dict[str, Any]:
    """The `resources:` of a task YAML, for pricing candidates that leave fields to the task."""
    try:
        config = yaml.safe_load(Path(task_yaml).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{task_yaml}: cannot read the task YAML: {e}") from None
    res = config.get("resources") or {}
    if "any_of" in res or "ordered" in res or not isinstance(res, dict):
        return {}
    return dict(res)


def task_nodes(task_yaml: Path) -> int:
    """`num_nodes` of a task YAML (1 when absent): prices are per cluster, not per node."""
    try:
        config = yaml.safe_load(Path(task_yaml).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{task_yaml}: cannot read the task YAML: {e}") from None
    return int(config.get("num_nodes") or 1)


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
    ):
        self.offline = offline
        self.catalog = catalog
        self.defaults = task_defaults(task_yaml) if task_yaml else {}
        self.num_nodes = num_nodes
        self.managed = managed
        self.job_recovery = job_recovery if managed else None
        if managed and job_recovery is None:
            self.job_recovery = {"strategy": "FAILOVER", "max_restarts_on_errors": 3}
        self._launcher = launcher
        self._options: dict[str, PlanOption] = {}
        if offline:
            use_offline_catalog(catalog)

    @property
    def launcher(self) -> SkyLauncher:
        if self._launcher is None:
            self._launcher = SdkLauncher(managed=self.managed)
        return self._launcher

    def plan(self, candidates: Sequence[PlanOption], blocked: Sequence[str] = ()) -> list[PlanOption]:
        if not self.offline:
            return optimize(candidates, blocked, defaults=self.defaults, num_nodes=self.num_nodes)
        with offline_clouds(self.catalog):
            return optimize(candidates, blocked, defaults=self.defaults, num_nodes=self.num_nodes)

    def launch(self, cluster: str, option: PlanOption, job: JobSpec) -> ClusterStatus:
        info = self._info(cluster)
        if info is not None and _CLUSTER_STATES.get(info.status) in (
            ClusterState.PROVISIONING,
            ClusterState.UP,
        ):
            return self.status(cluster)
        task = build_task(job, option, job_recovery=self.job_recovery)
        from sky import exceptions as sky_exceptions

        try:
            self.launcher.launch(task, cluster)
        except sky_exceptions.ResourcesUnavailableError as e:
            self._down_quietly(cluster)  # SkyPilot may leave an INIT record behind
            raise CapacityError(
                f"{option.infra}: {str(e).strip().splitlines()[0] if str(e).strip() else 'no capacity'}"
            ) from e
        except (sky_exceptions.ApiServerConnectionError, ConnectionError, TimeoutError) as e:
            raise ProviderUnavailable(f"SkyPilot API server unreachable: {e}") from e
        self._options[cluster] = option
        return self.status(cluster)

    def _info(self, cluster: str) -> SkyClusterInfo | None:
        try:
            return self.launcher.info(cluster)
        except (ConnectionError, TimeoutError) as e:
            raise ProviderUnavailable(f"SkyPilot status for {cluster}: {e}") from e

    def _down_quietly(self, cluster: str) -> None:
        with contextlib.suppress(Exception):  # the launch error is what the caller must see
            self.launcher.down(cluster)

    def status(self, cluster: str) -> ClusterStatus:
        info = self._info(cluster)
        if info is None:
            raise NotFound(f"SkyPilot cluster {cluster!r} does not exist")
        option = self._options.get(cluster) or PlanOption(
            infra=info.infra or "unknown",
            instance_type=None,
            accelerators=None,
            use_spot=False,
            hourly_usd=None,
        )
        state = _CLUSTER_STATES.get(info.status, ClusterState.TERMINATED)
        job = _JOB_STATES.get(info.job_status or "PENDING", JobState.FAILED)
        launched = datetime.fromtimestamp(info.launched_at or 0, UTC)
        return ClusterStatus(
            name=cluster,
            state=state,
            option=option,
            job=job,
            launched_at=launched,
            detail=f"sky {'managed job' if self.managed else 'job'} {info.job_id}",
        )

    def logs(self, cluster: str) -> str:
        info = self._info(cluster)
        if info is None:
            raise NotFound(f"SkyPilot cluster {cluster!r} does not exist")
        return self.launcher.logs(cluster, info.job_id)

    def teardown(self, cluster: str) -> None:
        self.launcher.down(cluster)
        self._options.pop(cluster, None)

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


def _get(record: Any, key: str) -> Any:
    return record.get(key) if isinstance(record, dict) else getattr(record, key, None)


def _name(value: Any) -> str:
    return getattr(value, "value", None) or getattr(value, "name", None) or str(value)
