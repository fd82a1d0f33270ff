"""`python -m lifeboat_dr.standins.trainer --steps N [--ckpt-dir DIR] --every K [--loss-log FILE] [--resume URI]`

The numpy trainer; flags, environment and log lines in `standins/trainer/options.py` and `logs.py`.
The checkpoints are committed under the epoch in $LIFEBOAT_EPOCH (lifeboat_dr.core.commit): fenced
out by a failover, it stops at its next checkpoint and exits 75 with one line.
"""

from __future__ import annotations

import sys

from lifeboat_dr.core.commit import FENCED_EXIT, epoch_from_env
from lifeboat_dr.kernel.errors import LifeboatError, StopFailover
from lifeboat_dr.standins.trainer.core import Trainer
from lifeboat_dr.standins.trainer.options import parse_trainer_args


def main(argv: list[str] | None = None) -> int:
    a = parse_trainer_args(
        argv, prog="python -m lifeboat_dr.standins.trainer", description=__doc__.splitlines()[0]
    )
    epoch = 0 if a.audit else epoch_from_env()  # an audit's own folder is never fenced
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
