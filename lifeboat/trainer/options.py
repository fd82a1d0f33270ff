"""The command line every demo trainer takes (numpy `lifeboat.trainer`, torch `lifeboat.trainer.dcp`).

`--steps N --ckpt-dir DIR --every K --loss-log FILE [--resume URI]`. The resume URI may also
come from $LIFEBOAT_RESUME_FROM (the runbook's default `job.resume`). Under a checkpoint audit
($LIFEBOAT_AUDIT_DIR set) checkpoints, loss log and heartbeat go to that folder instead, so
the audited checkpoints are never written over.
"""

from __future__ import annotations

import argparse
import os


def parse_trainer_args(argv: list[str] | None, *, prog: str, description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--steps", type=int, required=True, help="train until this step")
    p.add_argument("--ckpt-dir", required=True, help="where step-N/ checkpoints are written")
    p.add_argument("--every", type=int, default=10, help="checkpoint every K steps (0: never)")
    p.add_argument("--loss-log", required=True, help="JSON lines {step, loss, ts}, appended")
    p.add_argument(
        "--resume",
        default=os.environ.get("LIFEBOAT_RESUME_FROM") or None,
        help="checkpoint (or checkpoint folder: its newest committed) to resume from",
    )
    p.add_argument("--heartbeat", default=None, help="heartbeat file (default CKPT_DIR/heartbeat.json)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step (demos, kill tests)")
    a = p.parse_args(argv)
    if audit := os.environ.get("LIFEBOAT_AUDIT_DIR"):  # under audit: never write over what is audited
        a.ckpt_dir, a.loss_log = os.path.join(audit, "checkpoints"), os.path.join(audit, "loss.jsonl")
        a.heartbeat = os.path.join(audit, "heartbeat.json")
    a.heartbeat = a.heartbeat or os.path.join(a.ckpt_dir, "heartbeat.json")
    return a
