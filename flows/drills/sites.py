"""Drills of the sites: a zone or region gone, a corrupted replica. See __init__.py."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lifeboat_dr.flows.drills.base import (
    Check,
    Outcome,
    Rig,
    amend,
    completed,
    simulated_outage,
)
from lifeboat_dr.kernel.errors import ProviderUnavailable

# The cloud the region drill pretends the primary lives in: a zone, its region, another
# region, another cloud. Prices are FakeCompute's list (see `PricedLocal`).
FAILED_REGION = "aws/us-east-1"
FAILED_ZONE = "aws/us-east-1/us-east-1a"
REGION_CANDIDATES = (FAILED_ZONE, "aws/us-east-1/us-east-1b", "aws/us-west-2", "gcp/us-central1")
REGION_PRICES = {"aws": 98.32, "gcp": 88.49}


# -- region-outage -------------------------------------------------------------------------


class UnreachableStore:
    """The failed region's store: every call fails as a dead endpoint does (retryable)."""

    def __init__(self, uri: str):
        from lifeboat_dr.providers.storage.local import LocalStore

        self.uri, self.capabilities = uri, LocalStore.capabilities

    def _down(self, *args, **kwargs):
        raise ProviderUnavailable(f"{self.uri}: connection refused (drill: the region is down)")

    list = head = read = put = delete = server_copy = _down


class PricedLocal:
    """Compute for the region drill: plans like a cloud, runs like the sandbox.

    `plan` is `FakeCompute`'s (a price list per cloud, the blocked infras excluded by the
    same `is_blocked` rule SkyPilot's planner is given) so the runbook's cloud-looking
    candidates are priced and the failed zone/region is refused; launch, run, logs and
    teardown are `LocalCompute`'s, so the job really resumes and proves its losses. (The
    SkyPilot offline optimizer would do for `plan` too, but importing `sky` costs seconds
    on two cores, and drills stay fast.)"""

    def __init__(self, local, prices: Mapping[str, float] = REGION_PRICES):
        from lifeboat_dr.providers.compute.fake import FakeCompute

        self.local, self.planner = local, FakeCompute(prices=dict(prices))

    def plan(self, candidates, blocked=()):
        return self.planner.plan(candidates, blocked)

    def __getattr__(self, name: str):
        if "local" not in vars(self):  # a copy or unpickling, before __init__: no recursion
            raise AttributeError(name)
        return getattr(self.local, name)


def prepare_region_outage(rig: Rig, options: Mapping[str, Any]) -> None:
    from lifeboat_dr.providers.compute.local import LocalCompute

    rig.scope = rig.scope or "region"
    failed = FAILED_ZONE if rig.scope == "az" else FAILED_REGION
    accelerators = rig.rb.secondary.candidates[0].accelerators if rig.rb.secondary.candidates else None
    rig.rb = amend(
        rig.rb,
        primary={"infra": failed},
        secondary={"candidates": [{"infra": i, "accelerators": accelerators} for i in REGION_CANDIDATES]},
    )
    rig.primary = UnreachableStore(rig.rb.store_uri(rig.rb.primary.store))
    rig.compute = PricedLocal(LocalCompute(rig.clusters_root))
    rig.facts.update(failed=failed)
    simulated_outage(
        rig,
        f"provider: {failed} unreachable (drill: {rig.scope} outage)",
        f"checkpoint_freshness: {rig.primary.uri} unreachable",
    )


def verify_region_outage(rig: Rig, outcome: Outcome) -> list[Check]:
    certified, fenced = outcome.steps.get("certify"), outcome.steps.get("fence")
    provisioned = outcome.steps.get("provision")
    checks = plan_checks(
        outcome.steps.get("plan") or (),
        provisioned.option.infra if provisioned else None,
        rig.facts["failed"],
        rig.scope,
    )
    mode = getattr(certified, "mode", None)
    checks += [
        Check(
            "certification ran manifest-only with the source down",
            mode == "manifest-only-source-down",
            f"mode {mode}, step {_certified_step(certified)}",
        ),
        Check(
            "fenced on the secondary alone (the primary store is down)",
            fenced is not None and list(fenced.stores) == [rig.rb.store_uri(rig.rb.secondary.store)],
            f"lease epoch {getattr(fenced, 'epoch', None)} on {list(getattr(fenced, 'stores', ()))}",
        ),
        completed(outcome),
    ]
    return checks


def plan_checks(options, chosen: str | None, failed: str, scope: str | None) -> list[Check]:
    """The plan never offers the failed infra; the chosen place fits the outage's scope."""
    from lifeboat_dr.providers.compute.base import is_blocked

    offered = [o.infra for o in options]
    bad = [i for i in offered if is_blocked(i, [failed])]
    region = "/".join(failed.split("/")[:2])
    checks = [
        Check(
            f"the plan never offers the failed {scope or 'infra'} ({failed})",
            bool(offered) and not bad and chosen is not None and not is_blocked(chosen, [failed]),
            f"offered {offered}, provisioned on {chosen}" + (f"; offered blocked {bad}" if bad else ""),
        )
    ]
    if scope == "az":
        checks.append(
            Check(
                "a zone outage fails over within the region",
                chosen is not None and is_blocked(chosen, [region]),
                f"provisioned on {chosen}",
            )
        )
    elif scope == "region":
        checks.append(
            Check(
                "a region outage fails over out of the region",
                chosen is not None and not is_blocked(chosen, [region]),
                f"provisioned on {chosen}",
            )
        )
    return checks


# -- corrupted-replica ---------------------------------------------------------------------


def prepare_corrupted_replica(rig: Rig, options: Mapping[str, Any]) -> None:
    from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME

    secondary = Path(rig.rb.store_uri(rig.rb.secondary.store).removeprefix("file://"))
    committed = sorted(p.parent for p in secondary.glob(f"step-*/{MANIFEST_NAME}"))
    if len(committed) < 2:
        raise RuntimeError(f"{secondary}: fewer than two committed replica checkpoints to drill with")
    corrupt = int(options.get("corrupt", 1))  # how many of the newest to corrupt (tests: 2)
    flipped = [flip_byte(_shards(d)[0], rig.rng) for d in committed[-corrupt:]]
    rig.facts.update(newest=_step_of(committed[-1]), previous=_step_of(committed[-2]), flipped=flipped)
    simulated_outage(rig)


def flip_byte(path: Path, rng: random.Random) -> tuple[str, int, int, int]:
    """Flip one bit of one byte (bit rot): same size. Returns (path, offset, size before, after)."""
    data = bytearray(path.read_bytes())
    offset = rng.randrange(len(data))
    data[offset] ^= 1 << rng.randrange(8)
    # A new file renamed over the old one: a replica may be a hard link to the primary's
    # shard (a local server-side copy), and only the replica may rot.
    tmp = path.with_name(f".tmp-flip-{path.name}")
    tmp.write_bytes(bytes(data))
    tmp.replace(path)
    return str(path), offset, len(data), path.stat().st_size


def _shards(checkpoint: Path) -> list[Path]:
    """The data files of a checkpoint folder: not its manifest, not its guarded-commit marker
    (rot there says nothing about the data), not a store's hidden sidecars."""
    from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME
    from lifeboat_dr.core.fencing import COMMIT_MARKER

    markers = {MANIFEST_NAME, COMMIT_MARKER}
    return sorted(p for p in checkpoint.iterdir() if p.name not in markers and not p.name.startswith("."))


def _step_of(path: Path) -> int:
    return int(path.name.split("-")[1])


def _certified_step(report: Any) -> int | None:
    """The certified step of the failover's certification report (None: none)."""
    return getattr(getattr(report, "certified", None), "step", None)


def verify_corrupted_replica(rig: Rig, outcome: Outcome) -> list[Check]:
    certified = outcome.steps.get("certify")
    return corrupted_replica_checks(rig.facts, certified, outcome.entry) + [completed(outcome)]


def corrupted_replica_checks(facts: Mapping[str, Any], certified: Any, entry: Any) -> list[Check]:
    newest, previous = facts["newest"], facts["previous"]
    rejected = [f"step {r.step}: {r.reason} — {r.detail}" for r in getattr(certified, "rejected", ())]
    step = _certified_step(certified)
    resumed = getattr(entry, "checkpoint", None) or ""
    return [
        Check(
            "the corrupted shard keeps its size",
            all(f[2] == f[3] for f in facts["flipped"]),
            "; ".join(f"{Path(f[0]).parent.name}/{Path(f[0]).name} byte {f[1]}" for f in facts["flipped"]),
        ),
        Check(
            "certification rejects it for its CRC",
            any(r.startswith(f"step {newest}: crc mismatch") for r in rejected),
            " | ".join(rejected) or "nothing rejected",
        ),
        Check(
            "certification falls back to the previous checkpoint",
            step == previous,
            f"certified step {step}, previous checkpoint {previous}",
        ),
        Check(
            "the failover resumes from it",
            resumed.rstrip("/").endswith(f"step-{previous:08d}"),
            resumed or "no checkpoint in the ledger",
        ),
    ]
