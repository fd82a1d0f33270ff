"""`python -m lifeboat.trainer --steps N [--ckpt-dir DIR] --every K [--loss-log FILE] [--resume URI]`

The resume URI may also come from $LIFEBOAT_RESUME_FROM (the runbook's default `job.resume`);
the checkpoint folder from $LIFEBOAT_STORE (a file:// store, set by a failover) and the
epoch its checkpoints are committed under from $LIFEBOAT_EPOCH (lifeboat.commit). Fenced out
by a failover, it stops at its next checkpoint and exits 75 with one line.
Under a checkpoint audit ($LIFEBOAT_AUDIT_DIR set) checkpoints, loss log and heartbeat go
to that folder instead, so the audited checkpoints are never written over.
"""

from __future__ import annotations

import argparse
import os
import sys

from lifeboat.commit import FENCED_EXIT, STORE_ENV, epoch_from_env
from lifeboat.errors import LifeboatError, StopFailover
from lifeboat.trainer.core import Trainer


def _store_dir(uri: str | None) -> str | None:
    """A file:// store URI (or a plain path) as a folder; None for other stores."""
    if not uri:
        return None
    if uri.startswith("file://"):
        return uri[len("file://") :]
    return None if "://" in uri else uri


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lifeboat.trainer", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, required=True, help="train until this step")
    p.add_argument(
        "--ckpt-dir",
        default=_store_dir(os.environ.get(STORE_ENV)),
        help=f"where step-N/ checkpoints are written (default: ${STORE_ENV}, a file:// store)",
    )
    p.add_argument("--every", type=int, default=10, help="checkpoint every K steps")
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
    epoch = epoch_from_env()
    if audit := os.environ.get("LIFEBOAT_AUDIT_DIR"):  # under audit: never write over what is audited
        a.ckpt_dir, a.loss_log = os.path.join(audit, "checkpoints"), os.path.join(audit, "loss.jsonl")
        a.heartbeat = os.path.join(audit, "heartbeat.json")
        epoch = 0  # its own folder, never fenced
    if not a.ckpt_dir:
        p.error(f"--ckpt-dir is required (or ${STORE_ENV})")
    a.loss_log = a.loss_log or f"{a.ckpt_dir.rstrip('/')}-loss.jsonl"
    trainer = Trainer(a.ckpt_dir, a.loss_log, seed=a.seed, heartbeat=a.heartbeat, echo=True, epoch=epoch)
    try:
        state = trainer.run(a.steps, a.every, resume=a.resume, step_seconds=a.step_seconds)
    except StopFailover as e:
        print(f"trainer: fenced out, exiting: {e}", file=sys.stderr, flush=True)
        return FENCED_EXIT
    except LifeboatError as e:
        print(f"trainer: {e}", file=sys.stderr)
        return 1
    print(f"trainer: done at step {state.step}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
