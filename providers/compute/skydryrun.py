"""The user's task through SkyPilot's own dry-run launch, in process, with no API server.

`sky.launch(dryrun=True)` from the client SDK needs an API server (~1 GB, 8 s to start).
The server runs `sky.execution.launch`, which is importable in process and takes the same
path: admin policy, storage construction, the optimizer, then
`CloudVmRayBackend.provision(dryrun=True)`, which renders the cloud's cluster template
with the chosen instance, region and image (`$SKY_RUNTIME_DIR/.sky/generated/<cluster>.yml`)
and stops before calling the cloud. Three things there would reach out, and are answered
here instead, each said in the result:

- the enabled-clouds check and AWS's zone mapping: `skyplan.offline_clouds` (the snapshot);
- bucket mounts (`s3://`, `gs://`): `Storage.construct()` asks the cloud whether the bucket
  exists, so each is checked by what construct() runs first, SkyPilot's
  `Storage._validate_storage_spec` (source, name, mode: a sub-path in MOUNT mode fails
  there), then left out of the launch (listed in `skipped_mounts`);
- the local `rsync` check (the backend syncs nothing on a dry run);
- AWS's `describe_images` for the AMI's root device (`AWS.get_image_root_device_name`):
  SkyPilot's default device name, as SkyPilot itself uses for its own images.

The task launched is the one the failover would launch (`build_task` with the first
feasible candidate and a checkpoint placeholder): no location pinned, store references
moved to the secondary, the resume argument or env set.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.compute.base import JobSpec, PlanOption


@dataclass(frozen=True)
class DryRun:
    cluster: str
    option: PlanOption  # the candidate the task was dry-run on
    resources: str  # what SkyPilot's optimizer chose for it, as SkyPilot prints it
    cluster_yaml: str | None  # SkyPilot's rendered cluster config (region, instance, image)
    skipped_mounts: tuple[str, ...]  # bucket mounts checked for spec but not constructed
    calls: tuple[str, ...]  # the SkyPilot calls that ran

    def summary(self) -> str:
        skipped = (
            f"; bucket mounts not constructed: {', '.join(self.skipped_mounts)}"
            if self.skipped_mounts
            else ""
        )
        return f"SkyPilot dry-run launch of {self.cluster} on {self.resources}{skipped}"


def dry_run_launch(
    job: JobSpec,
    candidates: Sequence[PlanOption],
    *,
    blocked: Sequence[str] = (),
    job_recovery: dict | None = None,
) -> DryRun:
    """Plan `candidates` over the shipped snapshot (`blocked` excluded: the primary), build
    the failover's task for the first feasible one from `job` (its `task_yaml`, its
    checkpoint a placeholder) and dry-run launch it; `job_recovery` makes it a managed job.
    Raises ConfigError with SkyPilot's first line when SkyPilot refuses the task."""
    from lifeboat_dr.providers.compute.skycatalog import choose_catalog
    from lifeboat_dr.providers.compute.skypilot import SkyPilotCompute, build_task, task_nodes
    from lifeboat_dr.providers.compute.skyplan import import_sky, offline_clouds

    task_yaml = job.task_yaml

    compute = SkyPilotCompute(
        offline=True,
        task_yaml=task_yaml,
        num_nodes=task_nodes(task_yaml),
        price_source=choose_catalog("snapshot").describe(),
    )
    options = [o for o in compute.plan(candidates, blocked) if o.feasible]
    if not options:
        raise ConfigError(f"{job.name}: no feasible candidate to dry-run the task on")
    option = options[0]
    calls = ["sky.optimizer.Optimizer.optimize (plan)", "sky.Task.from_yaml_config"]
    task = build_task(job, option, job_recovery=job_recovery)
    skipped = tuple(sorted(f"{dst} <- {s.source}" for dst, s in (task.storage_mounts or {}).items()))
    cluster = f"{job.name}-dryrun"
    sky = import_sky()
    from sky import execution, sky_logging
    from sky.backends import backend_utils

    try:
        for storage in (task.storage_mounts or {}).values():
            # what construct() checks first, before it asks the cloud about the bucket
            storage._validate_storage_spec(storage.name)
        calls.append("sky.data.Storage._validate_storage_spec (each bucket mount)")
        task.storage_mounts = {}
        with offline_clouds(), _no_network_lookups(backend_utils), sky_logging.silent():
            execution.launch(task, cluster_name=cluster, dryrun=True, _quiet_optimizer=True)
    except Exception as e:
        text = str(e).strip().splitlines()
        raise ConfigError(
            f"{task_yaml}: SkyPilot's dry-run launch refused the task: {type(e).__name__}: {text[0] if text else ''}"
        ) from None
    calls.append("sky.execution.launch(dryrun=True) -> CloudVmRayBackend.provision(dryrun=True)")
    rendered = _rendered_config(cluster)
    del sky
    return DryRun(cluster, option, option.describe(), rendered, skipped, tuple(calls))


@contextlib.contextmanager
def _no_network_lookups(backend_utils):
    """The rsync check and AWS's AMI lookup, answered locally for the dry run's duration."""
    from sky.clouds import aws as sky_aws

    saved_rsync = backend_utils.check_rsync_installed
    saved_root = sky_aws.AWS.__dict__["get_image_root_device_name"]
    backend_utils.check_rsync_installed = lambda: None
    sky_aws.AWS.get_image_root_device_name = classmethod(
        lambda cls, image_id, region: sky_aws.DEFAULT_ROOT_DEVICE_NAME
    )
    try:
        yield
    finally:
        backend_utils.check_rsync_installed = saved_rsync
        sky_aws.AWS.get_image_root_device_name = saved_root


def _rendered_config(cluster: str) -> str | None:
    """The cluster YAML SkyPilot rendered for the dry run, if it left one."""
    import os

    root = Path(os.environ.get("SKY_RUNTIME_DIR", Path.home())) / ".sky" / "generated"
    for name in (f"{cluster}.yml", f"{cluster}.yml.tmp"):
        with contextlib.suppress(OSError):
            return (root / name).read_text()
    return None
