"""`python -m lifeboat_dr.standins.trainer.torchrun [torchrun flags] -m MODULE ...`: torchrun for
the torch demo trainer.

Exactly `torch.distributed.run`, except for a job that a failover fenced out: when the first
rank to stop exited 75 (`lifeboat_dr.core.commit.FENCED_EXIT`, the trainer's own "another site
holds the job now") and the others exited 75 too or were stopped by torchrun's SIGTERM after
it, it exits 75, leaving the trainer's one line, instead of torchrun's failure report and
traceback (which are for crashes, and still come for them). Likewise a job the training
guard ended (`lifeboat_dr.core.guard`: 80 nccl, 81 cuda, 82 timeout, 83 hang) exits with the
guard's code when every rank exited with a guard code or was stopped by a signal after it.
"""

from __future__ import annotations

import signal
import sys

from lifeboat_dr.core.commit import FENCED_EXIT
from lifeboat_dr.core.guard.faults import EXIT_CODES


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, record
    from torch.distributed.run import parse_args, run

    @record  # torchrun's own failure report, for every other failure
    def launch(args) -> int:
        try:
            run(args)
        except ChildFailedError as e:
            _, first = e.get_first_failure()
            if first.exitcode == FENCED_EXIT and all(
                f.exitcode in (FENCED_EXIT, -signal.SIGTERM) for f in e.failures.values()
            ):
                return FENCED_EXIT
            guarded = {f.exitcode for f in e.failures.values()} & set(EXIT_CODES.values())
            stopped = (-signal.SIGTERM, -signal.SIGKILL, *guarded)
            if guarded and all(f.exitcode in stopped for f in e.failures.values()):
                return min(guarded)  # the guard said why, in one line; peers it stopped follow
            raise
        return 0

    return launch(parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
