"""Runbooks of one fleet, written for a test: the shipped 70B pretraining runbook (its SkyPilot
task beside it), renamed, resized and given its own stores, primary, candidates and `fleet:`."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
LLAMA = ROOT / "runbooks" / "llama-70b-pretrain.yaml"


def fleet_runbook(
    folder: Path,
    name: str,
    *,
    gpus: int,
    primary: str = "aws/us-east-1",
    candidates: tuple[tuple[str, str], ...] = (("gcp/us-central1", "H100:8"),),
    price: float = 3.8,
    quota: tuple[tuple[str, str, int], ...] = (),
    priority: int = 0,
    grouping: tuple[str, str] | None = None,
    live_quota: bool = False,
) -> Path:
    """`candidates`: (infra, accelerators); `quota`: (infra, GPU type, GPUs) declared in `fleet.quota`;
    `grouping`: (lock store, window) its confirmed outages group in (`fleet.lock_store`, `group_window`);
    `live_quota`: the live quota caps the declared one (`fleet.live_quota`)."""
    doc = yaml.safe_load(LLAMA.read_text())
    doc["name"] = name
    doc["primary"] = {"infra": primary, "store": f"s3://acme-{name}/ckpt"}
    doc["secondary"] = {
        "infra": candidates[0][0],
        "store": f"gs://acme-dr-{name}/ckpt",
        "candidates": [{"infra": infra, "accelerators": acc} for infra, acc in candidates],
    }
    doc["verify"]["loss_log"] = f"s3://acme-{name}/ckpt/loss.jsonl"
    doc["cluster"] = {**doc["cluster"], "gpus": gpus, "gpu_hour_usd": price}
    doc["fleet"] = {
        "priority": priority,
        "quota": [{"infra": infra, "accelerator": gpu, "gpus": n} for infra, gpu, n in quota],
        **({"live_quota": True} if live_quota else {}),
    }
    if grouping is not None:
        doc["fleet"] |= {"lock_store": grouping[0], "group_window": grouping[1]}
    (folder / "jobs").mkdir(exist_ok=True)
    shutil.copy(ROOT / "runbooks" / "jobs" / "llama-70b.sky.yaml", folder / "jobs" / "llama-70b.sky.yaml")
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
