"""The command line every demo trainer takes (numpy `lifeboat_dr.standins.trainer`, torch `lifeboat_dr.standins.trainer.dcp`).

`--steps N --ckpt-dir DIR --every K --loss-log FILE [--resume URI]`. The resume URI may also
come from $LIFEBOAT_RESUME_FROM (the runbook's default `job.resume`), the checkpoint folder
from $LIFEBOAT_STORE (a file:// store, set by a failover). Under a checkpoint audit
($LIFEBOAT_AUDIT_DIR set) checkpoints, loss log and heartbeat go to that folder instead, so
the audited checkpoints are never written over (`a.audit` says so: nothing there is fenced).
"""

from __future__ import annotations

import argparse
import os

from lifeboat_dr.core.commit import STORE_ENV


def store_dir(uri: str | None) -> str | None:
    """A file:// store URI (or a plain path) as a folder; None for other stores."""
    if not uri:
        return None
    if uri.startswith("file://"):
        return uri[len("file://") :]
    return None if "://" in uri else uri


def parse_trainer_args(argv: list[str] | None, *, prog: str, description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--steps", type=int, required=True, help="train until this step")
    p.add_argument(
        "--ckpt-dir",
        default=store_dir(os.environ.get(STORE_ENV)),
        help=f"where step-N/ checkpoints are written (default: ${STORE_ENV}, a file:// store)",
    )
    p.add_argument("--every", type=int, default=10, help="checkpoint every K steps (0: never)")
    p.add_argument("--loss-log", help="JSON lines {step, loss, ts}, appended (default CKPT_DIR-loss.jsonl)")
    p.add_argument(
        "--resume",
        default=os.environ.get("LIFEBOAT_RESUME_FROM") or None,
        help="checkpoint (or checkpoint folder: its newest committed) to resume from",
    )
    p.add_argument("--heartbeat", default=None, help="heartbeat file (default CKPT_DIR/heartbeat.json)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step (demos, kill tests)")
    a = p.parse_args(argv)
    a.audit = bool(audit := os.environ.get("LIFEBOAT_AUDIT_DIR"))
    if audit:  # under audit: never write over what is audited
        a.ckpt_dir, a.loss_log = os.path.join(audit, "checkpoints"), os.path.join(audit, "loss.jsonl")
        a.heartbeat = os.path.join(audit, "heartbeat.json")
    if not a.ckpt_dir:
        p.error(f"--ckpt-dir is required (or ${STORE_ENV})")
    a.loss_log = a.loss_log or f"{a.ckpt_dir.rstrip('/')}-loss.jsonl"
    a.heartbeat = a.heartbeat or os.path.join(a.ckpt_dir, "heartbeat.json")
    return a
