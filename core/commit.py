"""Commit or exit: the one call a training loop makes after saving a checkpoint.

A checkpoint counts for Lifeboat once its guarded commit landed (`lifeboat_dr.core.fencing`): the
commit is counted in the job's lease by a conditional write while the writer's epoch is
current, then its marker (`<checkpoint>/lifeboat-commit.json`) is written. A writer that a
failover fenced out (a partitioned primary still running) gets no marker, and exits.

In a PyTorch loop (Lifeboat's failover sets `LIFEBOAT_STORE` and `LIFEBOAT_EPOCH` in the
resumed job's environment; an original primary runs at epoch 0)::

    from lifeboat_dr.core.commit import commit_or_exit

    for step in range(start, steps):
        ...
        if step % every == 0:
            dcp.save(state, checkpoint_id=f"/mnt/ckpt/step-{step}")  # or torch.save, per rank
            dist.barrier()                                            # every rank has written
            if dist.get_rank() == 0:
                commit_or_exit(f"step-{step}", step)                  # fenced: exits 75, one line
            dist.barrier()

The checkpoint name is its directory relative to the store root (the runbook's store).
"""

from __future__ import annotations

import os
import sys

from lifeboat_dr.core.fencing import COMMIT_MARKER, guarded_commit
from lifeboat_dr.kernel.errors import StopFailover
from lifeboat_dr.providers.storage.base import Store

EPOCH_ENV = "LIFEBOAT_EPOCH"
STORE_ENV = "LIFEBOAT_STORE"
FENCED_EXIT = 75  # EX_TEMPFAIL: not a crash; another site holds the job now


def epoch_from_env() -> int:
    """The epoch this writer holds: `$LIFEBOAT_EPOCH`, 0 (the original primary) when unset."""
    value = os.environ.get(EPOCH_ENV, "0") or "0"
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"lifeboat: {EPOCH_ENV}={value!r} is not an epoch (a whole number)") from None


def commit_checkpoint(
    store: Store, checkpoint: str, step: int, epoch: int, *, record: dict | None = None
) -> int:
    """Guarded commit of checkpoint directory `checkpoint`; returns its sequence number.
    `record` goes into its commit record (the training guard's `{"emergency": ...}`).
    Raises `StopFailover` when fenced out (nothing written)."""
    return guarded_commit(store, f"{checkpoint.strip('/')}/{COMMIT_MARKER}", epoch, step, record=record)


def commit_or_exit(
    checkpoint: str, step: int, *, store: Store | str | None = None, epoch: int | None = None
) -> int:
    """Commit `checkpoint` (its directory under the store root) or, when a failover fenced
    this writer out, print one line to stderr and exit with `FENCED_EXIT`.

    `store` is a Store or a store URI (default `$LIFEBOAT_STORE`); `epoch` defaults to
    `$LIFEBOAT_EPOCH` (0 when unset). Returns the commit's sequence number."""
    if store is None or isinstance(store, str):
        from lifeboat_dr.providers.storage import open_store

        uri = store or os.environ.get(STORE_ENV)
        if not uri:
            raise SystemExit(f"lifeboat: no checkpoint store: pass store= or set {STORE_ENV}")
        store = open_store(uri)
    try:
        return commit_checkpoint(store, checkpoint, step, epoch_from_env() if epoch is None else epoch)
    except StopFailover as e:
        print(f"lifeboat: fenced out, exiting: {e}", file=sys.stderr, flush=True)
        raise SystemExit(FENCED_EXIT) from None
