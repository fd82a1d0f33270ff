"""`python -m lifeboat.trainer --steps N --ckpt-dir DIR --every K --loss-log FILE [--resume URI]`

The numpy trainer; flags, environment and log lines in `lifeboat/trainer/options.py` and `logs.py`.
"""

from __future__ import annotations

import sys

from lifeboat.errors import LifeboatError
from lifeboat.trainer.core import Trainer
from lifeboat.trainer.options import parse_trainer_args


def main(argv: list[str] | None = None) -> int:
    a = parse_trainer_args(argv, prog="python -m lifeboat.trainer", description=__doc__.splitlines()[0])
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
