"""The trainer's maths, checkpoint layout and logs. See __init__.py."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, write_manifest
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.standins.trainer.logs import RunLog

DIM = 16
BATCH = 32
LR = 0.01
MOMENTUM = 0.9


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


@dataclass
class TrainerState:
    step: int  # last completed step (0: nothing trained yet)
    weights: np.ndarray
    velocity: np.ndarray


def _target(seed: int) -> np.ndarray:
    return np.random.default_rng([seed, 0xC0FFEE]).standard_normal(DIM)


def _batch(seed: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, step])
    x = rng.standard_normal((BATCH, DIM))
    y = x @ _target(seed) + 0.1 * rng.standard_normal(BATCH)
    return x, y


def newest_committed(ckpt_dir: str | Path, marker: str = MANIFEST_NAME) -> Path | None:
    """The newest `step-N/` under `ckpt_dir` that has its commit `marker` (the Lifeboat
    manifest; DCP's `.metadata` for the torch trainer), or None."""
    root = Path(ckpt_dir)
    done = sorted(p.parent for p in root.glob(f"step-*/{marker}"))
    return done[-1] if done else None


def local_checkpoint_path(uri: str) -> Path:
    """A local path or `file://` URI as a path; the demo trainers read nothing else."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(parsed.netloc + parsed.path if parsed.scheme else uri)
    raise ConfigError(f"{uri!r}: the demo trainer resumes from local paths or file:// URIs only")


class Trainer:
    def __init__(
        self,
        ckpt_dir: str | Path,
        loss_log: str | Path,
        *,
        seed: int = 0,
        heartbeat: str | Path | None = None,
        echo: bool = False,
        epoch: int = 0,
    ):
        self.ckpt_dir = Path(ckpt_dir)
        self.epoch = epoch  # the lease epoch its commits are made under (lifeboat_dr.core.fencing)
        self.loss_log = Path(loss_log)
        self.heartbeat = Path(heartbeat) if heartbeat else self.ckpt_dir / "heartbeat.json"
        self.seed = seed
        self.echo = echo  # also print each loss line to stdout (the job log), as the CLI does

    def fresh(self) -> TrainerState:
        return TrainerState(0, np.zeros(DIM), np.zeros(DIM))

    def load(self, uri: str) -> TrainerState:
        """Resume from a committed checkpoint, or from the newest one under a directory."""
        path = local_checkpoint_path(uri)
        if not (path / MANIFEST_NAME).exists():
            newest = newest_committed(path)
            if newest is None:
                raise ConfigError(f"{uri}: no committed checkpoint (no {MANIFEST_NAME})")
            path = newest
        meta = json.loads((path / MANIFEST_NAME).read_text())
        return TrainerState(int(meta["step"]), np.load(path / "model.npy"), np.load(path / "optim.npy"))

    def step(self, state: TrainerState) -> float:
        """One SGD step (state.step + 1); returns the loss before the update."""
        n = state.step + 1
        x, y = _batch(self.seed, n)
        err = x @ state.weights - y
        loss = float(np.mean(err**2))
        grad = 2.0 * x.T @ err / BATCH
        state.velocity = MOMENTUM * state.velocity + grad
        state.weights = state.weights - LR * state.velocity
        state.step = n
        return loss

    def save(self, state: TrainerState) -> Path:
        """Write shards, commit through the guarded commit (`StopFailover` when a failover
        fenced this writer out: nothing more is written), then the manifest."""
        from lifeboat_dr.core.commit import commit_checkpoint
        from lifeboat_dr.providers.storage.local import LocalStore

        d = self.ckpt_dir / checkpoint_name(state.step)
        if d.exists():  # left by an older lineage (a run we resumed before it): ours replaces it
            shutil.rmtree(d)
        d.mkdir(parents=True)
        for name, arr in (("model.npy", state.weights), ("optim.npy", state.velocity)):
            with open(d / name, "wb") as f:
                np.save(f, arr)
                f.flush()
                os.fsync(f.fileno())
        commit_checkpoint(LocalStore(self.ckpt_dir), d.name, state.step, self.epoch)
        write_manifest(d, state.step)
        return d

    def run(
        self, steps: int, every: int, *, resume: str | None = None, step_seconds: float = 0.0
    ) -> TrainerState:
        state = self.load(resume) if resume else self.fresh()
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        with RunLog(self.loss_log, self.heartbeat, echo=self.echo) as log:
            if resume:
                log.loaded(state.step)
            while state.step < steps:
                loss = self.step(state)
                log.step(state.step, loss)
                if every and state.step % every == 0:
                    self.save(state)
                if step_seconds:
                    time.sleep(step_seconds)
        return state
