"""Planning with SkyPilot's own optimizer, in process, with the failed primary blocked.

Two ways to see prices:
- offline (default for `lifeboat plan`, the tests and the demo): the catalog shipped in
  `providers/compute/catalog/v8/` is copied to `$SKY_RUNTIME_DIR/.sky/catalogs/v8/` with no
  `.meta` md5 files, which SkyPilot 0.14.1 treats as user-modified and never re-fetches
  (`sky/catalog/common.py: is_catalog_modified`). The enabled-clouds check is answered with
  the clouds that have a catalog, and AWS's account-specific zone mapping (an STS call) is
  skipped, so nothing touches the network.
- live: the user's own SkyPilot setup (enabled clouds, fetched catalogs), untouched.

SkyPilot reads SKY_RUNTIME_DIR once, when `sky` is first imported: offline planning must
happen before anything else in the process imports `sky` with another runtime dir.
"""

from __future__ import annotations

import contextlib
import filecmp
import gc
import os
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.compute.base import PlanOption, is_blocked

SHIPPED_CATALOG = Path(__file__).parent / "catalog" / "v8"
SCHEMA = "v8"
INSTALL_HINT = "SkyPilot is not installed: pip install 'skypilot==0.14.1' (or `pip install -e .`)"


def import_sky() -> Any:
    """`import sky`, the cyclic collector paused while SkyPilot's ~1,800 modules load, then frozen.

    Left running, the collector walks the import's young objects again and again: about a
    fifth of a cold `lifeboat plan`'s CPU (docs/bench-log.md). Frozen, the modules' objects are
    never scanned again; what the import itself left as cyclic garbage stays (once a process)."""
    if (sky := sys.modules.get("sky")) is not None:
        return sky
    collecting = gc.isenabled()
    gc.disable()
    try:
        import sky
    except ImportError as e:  # pragma: no cover - the project depends on it
        raise ConfigError(INSTALL_HINT) from e
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
    return sky


def default_runtime_dir() -> Path:
    env = os.environ.get("LIFEBOAT_SKY_RUNTIME_DIR")
    return Path(env) if env else Path.home() / ".cache" / "lifeboat" / "sky-offline"


def use_offline_catalog(catalog: Path = SHIPPED_CATALOG, runtime_dir: Path | None = None) -> Path:
    """Install `catalog` where SkyPilot looks and point SKY_RUNTIME_DIR at it (before `import sky`).

    Returns the runtime dir. Raises ConfigError when `sky` was already imported with another
    runtime dir: its catalog paths are fixed at import."""
    runtime_dir = (runtime_dir or default_runtime_dir()).resolve()
    target = runtime_dir / ".sky" / "catalogs" / SCHEMA
    for src in sorted(catalog.rglob("*.csv")):
        dst = target / src.relative_to(catalog)
        if not (dst.exists() and filecmp.cmp(src, dst, shallow=False)):
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        with contextlib.suppress(FileNotFoundError):  # an md5 here would invite a re-fetch
            (target / ".meta" / f"{src.relative_to(catalog)}.md5").unlink()
    if "sky.catalog.common" in sys.modules:
        current = Path(sys.modules["sky.catalog.common"]._ABSOLUTE_VERSIONED_CATALOG_DIR)
        if current.resolve() != target:
            raise ConfigError(
                f"SkyPilot was imported with its catalogs in {current}; offline planning needs "
                f"SKY_RUNTIME_DIR={runtime_dir} set before `sky` is imported"
            )
    else:
        os.environ["SKY_RUNTIME_DIR"] = str(runtime_dir)
    return runtime_dir


@contextlib.contextmanager
def offline_clouds(catalog: Path = SHIPPED_CATALOG) -> Iterator[list[Any]]:
    """Answer SkyPilot's enabled-clouds check with the clouds the catalog covers; no STS."""
    sky = import_sky()
    from sky import check as sky_check
    from sky.utils import registry as sky_registry

    names = sorted(p.name for p in catalog.iterdir() if p.is_dir() and p.name != "common")
    enabled = [sky_registry.CLOUD_REGISTRY.from_str(n) for n in names]
    saved = sky_check.get_cached_enabled_clouds_or_refresh
    sky_check.get_cached_enabled_clouds_or_refresh = lambda *a, **k: list(enabled)
    aws_catalog = None
    if "aws" in names:
        from sky.catalog import aws_catalog

        saved_df = aws_catalog._user_df
        # Without credentials SkyPilot falls back to the zone-ID catalog itself; we take
        # that path directly instead of letting it ask STS who we are.
        aws_catalog._user_df = aws_catalog._default_df
    try:
        yield enabled
    finally:
        sky_check.get_cached_enabled_clouds_or_refresh = saved
        if aws_catalog is not None:
            aws_catalog._user_df = saved_df
        del sky


def resources_for(option: PlanOption, defaults: Mapping[str, Any] | None = None) -> Any:
    """`sky.Resources` for a candidate over the task's own resources (the candidate wins)."""
    sky = import_sky()
    fields = {
        k: v
        for k, v in (defaults or {}).items()
        if k not in ("infra", "cloud", "region", "zone", "any_of", "ordered")
    }
    fields["infra"] = option.infra
    fields["use_spot"] = option.use_spot
    if option.accelerators:
        fields["accelerators"] = option.accelerators
    if option.instance_type:
        fields["instance_type"] = option.instance_type
    return sky.Resources(**fields)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".strip()


def optimize(
    candidates: Sequence[PlanOption],
    blocked: Sequence[str] = (),
    *,
    defaults: Mapping[str, Any] | None = None,
    num_nodes: int = 1,
) -> list[PlanOption]:
    """Price each candidate with `sky.optimizer.Optimizer.optimize`, blocked infras excluded.

    A candidate naming a whole cloud (`aws`) gets the optimizer's cheapest region that is
    not blocked. See `Compute.plan` for the shape of the answer."""
    sky = import_sky()
    from sky import exceptions as sky_exceptions
    from sky import optimizer as sky_optimizer
    from sky import sky_logging

    blocked_resources = [sky.Resources(infra=b) for b in blocked]
    out = []
    for c in candidates:
        if is_blocked(c.infra, blocked):
            out.append(replace(c, feasible=False, reason=f"{c.infra} is blocked"))
            continue
        if c.infra == "local" or c.infra.startswith(("k8s", "kubernetes", "ssh")):
            out.append(replace(c, feasible=False, reason=f"{c.infra}: no price in the catalog"))
            continue
        try:
            task = sky.Task(name="lifeboat-plan", run="true", num_nodes=num_nodes)
            task.set_resources(resources_for(c, defaults))
            dag = sky.Dag()
            dag.add(task)
            with sky_logging.silent():  # its tables and spinners are for its own CLI
                sky_optimizer.Optimizer.optimize(dag, blocked_resources=blocked_resources, quiet=True)
            best = task.best_resources
        except (sky_exceptions.ResourcesUnavailableError, ValueError) as e:
            out.append(replace(c, feasible=False, reason=_first_line(e)))
            continue
        infra = best.infra.to_str() if hasattr(best.infra, "to_str") else str(best.infra)
        accs = ",".join(f"{k}:{v:g}" for k, v in (best.accelerators or {}).items()) or None
        out.append(
            replace(
                c,
                infra=_region_infra(infra),
                instance_type=best.instance_type,
                accelerators=accs,
                use_spot=best.use_spot,
                hourly_usd=round(best.get_cost(3600) * num_nodes, 4),
                feasible=True,
                reason="",
            )
        )
    return sorted(out, key=lambda o: (not o.feasible, o.rank))


def _region_infra(infra: str) -> str:
    """`aws/us-west-2/usw2-az3` -> `aws/us-west-2`: the optimizer's zone is advisory."""
    return "/".join(infra.lower().split("/")[:2])
