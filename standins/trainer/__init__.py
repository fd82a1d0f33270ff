"""A tiny deterministic trainer for tests and the demo: numpy only, no GPU.

Linear regression by SGD with momentum. Every step's batch is drawn from a generator seeded
by (seed, step), so a run resumed from a checkpoint at step k reproduces the uninterrupted
run's losses from step k+1 on, bit for bit. Checkpoints are real: shards written first
(`model.npy`, `optim.npy`), then committed with a Lifeboat manifest; a directory without
the manifest is an interrupted write and is never resumed from.

`dcp.py` is its PyTorch twin (torchrun, DDP over gloo, `torch.distributed.checkpoint`; the
`torch` extra), with the same flags (`options.py`) and log lines (`logs.py`); `jobs.py` says
how to start either as a job.
"""

from lifeboat_dr.standins.trainer.core import Trainer, TrainerState, newest_committed

__all__ = ["Trainer", "TrainerState", "newest_committed"]
