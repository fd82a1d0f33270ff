"""`python -m lifeboat.trainer --steps N --ckpt-dir DIR --every K --loss-log FILE [--resume URI]`

The resume URI may also come from $LIFEBOAT_RESUME_FROM (the runbook's default `job.resume`).
Under a checkpoint audit ($LIFEBOAT_AUDIT_DIR set) checkpoints, loss log and heartbeat go
to that folder instead, so the audited checkpoints are never written over.
"""

from __future__ import annotations

import argparse
import os
import sys

from lifeboat.errors import LifeboatError
from lifeboat.trainer.core import Trainer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lifeboat.trainer", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, required=True, help="train until this step")
    p.add_argument("--ckpt-dir", required=True, help="where step-N/ checkpoints are written")
    p.add_argument("--every", type=int, default=10, help="checkpoint every K steps")
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
    try:
        state = Trainer(a.ckpt_dir, a.loss_log, seed=a.seed, heartbeat=a.heartbeat, echo=True).run(
            a.steps, a.every, resume=a.resume, step_seconds=a.step_seconds
        )
    except LifeboatError as e:
        print(f"trainer: {e}", file=sys.stderr)
        return 1
    print(f"trainer: done at step {state.step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
