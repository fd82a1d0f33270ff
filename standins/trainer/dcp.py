"""`torchrun --standalone --nproc-per-node 2 -m lifeboat_dr.standins.trainer.dcp --steps N --ckpt-dir DIR ...`

The torch twin of the numpy trainer: same flags (`options.py`), same log lines and heartbeat
(`logs.py`), checkpointed the way real training is. A tiny MLP with dropout, trained
data-parallel (DDP over gloo, CPU) with AdamW; each rank draws its batches and dropout masks
from its own torch RNG stream.

A checkpoint is one `torch.distributed.checkpoint` save of `step-N/`: the model and optimizer
state from `get_state_dict` (Adam's moments included), the step, and every rank's RNG state.
Each rank writes its `__<rank>_0.distcp`; rank 0 writes `.metadata` last, naming every storage
file (DCP's own commit point: layout `dcp`, which `replicate` copies and `certify` certifies).
Then rank 0 commits it through Lifeboat's guarded commit under `$LIFEBOAT_EPOCH`
(`lifeboat_dr.core.commit`), as the numpy trainer does, and tells every rank: fenced out by a
failover, all ranks stop at that checkpoint boundary and the job exits 75 with one line.

Resume reads `.metadata` through `SafeReader`: DCP's own reader, with the file unpickled by
the allow-list certification uses (core/checkpoints/safe_pickle.py), never `pickle.load`:
a certified checkpoint's metadata can build nothing but DCP's own classes. It builds a fresh
model and optimizer, takes their state dict from `get_state_dict` (which
initialises the optimizer state, so `dcp.load` has Adam's moments to load into), loads, then
`set_state_dict` and each rank's RNG state: the resumed losses are bitwise those of a run that
never stopped. Loading into a fresh optimizer's empty `state_dict()` instead loads no moments
and drifts from the second resumed step on (see docs/DESIGN.md); without the RNG state the
batches differ at once.

The step loop runs inside the training guard (`lifeboat_dr.core.guard`): an NCCL, CUDA or
timeout error ends the job with an emergency checkpoint of the last consistent step
(committed with its `emergency` record) and exit code 80-82, a silent hang with the
watchdog's stop (83). `$LIFEBOAT_HANG_MULTIPLE` and `$LIFEBOAT_HANG_FLOOR_S` set the
watchdog's bound; `$LIFEBOAT_INJECT=nccl-error@N` (or `cuda-error@N`) makes every rank
raise that error at step N, between the forward and the backward (the drills' fault);
`nccl-error@N:R` only rank R (its peers then wait in the all-reduce); `stop@N:R` makes rank R
SIGSTOP itself as step N begins, `stop-in-save@N:R` as the save of step N begins (a hang that
raises nothing, landing exactly there: its peers wait in the step's all-reduce or the save's
barrier).
`$LIFEBOAT_GUARD=off` runs the loop unguarded (the RPO benchmark's other side).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

from lifeboat_dr.core.checkpoints.safe_pickle import load_dcp_metadata
from lifeboat_dr.core.commit import FENCED_EXIT, commit_checkpoint, epoch_from_env
from lifeboat_dr.core.guard import HangRule, TrainingGuard
from lifeboat_dr.kernel.errors import ConfigError, LifeboatError, StopFailover
from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.standins.trainer.core import checkpoint_name, local_checkpoint_path, newest_committed
from lifeboat_dr.standins.trainer.logs import RunLog
from lifeboat_dr.standins.trainer.options import parse_trainer_args

DIM, HIDDEN, BATCH = 16, 32, 16  # BATCH per rank
LR, DROPOUT = 1e-2, 0.1
COMMIT = ".metadata"  # written last by rank 0: DCP's commit point
INJECT_ENV = "LIFEBOAT_INJECT"
INJECTABLE = ("nccl-error", "cuda-error", "stop", "stop-in-save")


def build(seed: int) -> tuple[DistributedDataParallel, torch.optim.Optimizer, torch.Tensor]:
    """The model (same initial weights on every rank), its optimizer and the task's target.
    Seeds this rank's RNG stream for batches and dropout afterwards."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.ReLU(), nn.Dropout(DROPOUT), nn.Linear(HIDDEN, 1))
    target = torch.randn(DIM, generator=torch.Generator().manual_seed(seed + 0xC0FFEE))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=LR)
    torch.manual_seed(seed * 1_000 + dist.get_rank())
    return ddp, optimizer, target


def train_step(
    model: DistributedDataParallel,
    optimizer: torch.optim.Optimizer,
    target: torch.Tensor,
    fault: Exception | None = None,
) -> float:
    """One step on this rank's batch; returns the loss before the update, averaged over ranks.
    `fault` is raised after the forward, where DDP's gradient all-reduce would meet it."""
    x = torch.randn(BATCH, DIM)
    y = torch.sin(x @ target)
    loss = nn.functional.mse_loss(model(x).squeeze(-1), y)
    if fault is not None:
        raise fault
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    return (mean / dist.get_world_size()).item()


def checkpoint_state(model, optimizer, step: int) -> dict:
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {
        "model": model_sd,
        "optim": optim_sd,
        "step": torch.tensor(step),
        "rng": {f"rank{dist.get_rank()}": torch.get_rng_state()},
    }


def save_checkpoint(model, optimizer, step: int, ckpt_dir: Path, group=None) -> Path:
    """`ckpt_dir/step-N/` as one DCP save over `group` (default: the job's); `.metadata`
    (rank 0, last) commits it."""
    path = ckpt_dir / checkpoint_name(step)
    if dist.get_rank() == 0 and path.exists():  # an older lineage's (a run we resumed before it)
        shutil.rmtree(path)  # its .metadata must never vouch for our shards
    dist.barrier(group)
    dcp.save(checkpoint_state(model, optimizer, step), checkpoint_id=path, process_group=group)
    return path


def commit_save(
    ckpt_dir: Path,
    path: Path,
    step: int,
    epoch: int,
    *,
    record: dict | None = None,
    group=None,
    committed: Callable[[int], None] | None = None,
) -> None:
    """Once every rank has saved `path`: rank 0 commits it (the guarded commit, under
    `epoch`, `record` in its commit record) and every rank learns the outcome. Raises
    `StopFailover` on every rank when a failover fenced this job out (no marker was written).
    `committed(step)` is told as soon as the marker is written (rank 0: before the broadcast,
    which a stuck peer can hold up; the others: after it)."""
    dist.barrier(group)  # every rank's shard is written
    refused, why = torch.zeros(1, dtype=torch.int32), ""
    if dist.get_rank() == 0:
        try:
            commit_checkpoint(LocalStore(ckpt_dir), path.name, step, epoch, record=record)
        except StopFailover as e:
            refused[0], why = 1, str(e)
        if committed and not refused.item():
            committed(step)
    dist.broadcast(refused, 0, group=group)
    if refused.item():
        raise StopFailover(why or "rank 0's guarded commit was refused")
    if committed and dist.get_rank() != 0:
        committed(step)


def committed_checkpoint(uri: str) -> Path:
    """The checkpoint `uri` names, or the newest committed one under it (a checkpoint folder)."""
    path = local_checkpoint_path(uri)
    if (path / COMMIT).exists():
        return path
    newest = newest_committed(path, COMMIT)
    if newest is None:
        raise ConfigError(f"{uri}: no committed DCP checkpoint (no {COMMIT})")
    return newest


class SafeReader(dcp.FileSystemReader):
    """DCP's file reader, its `.metadata` read by the allow-list (ConfigError, one line, for
    any other global) instead of torch's plain `pickle.load`."""

    def read_metadata(self, *args, **kwargs) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as f:
            metadata = load_dcp_metadata(f.read(), str(path))
        if not isinstance(metadata, Metadata):
            raise ConfigError(f"{path}: not a torch.distributed.checkpoint Metadata")
        if getattr(metadata, "storage_meta", None) is None:  # as torch's reader does
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def load_checkpoint(model, optimizer, path: Path) -> int:
    """Restore model, optimizer and this rank's RNG from the DCP checkpoint `path`; its step."""
    saved = SafeReader(path).read_metadata().state_dict_metadata
    ranks = sum(1 for key in saved if key.startswith("rng.rank"))
    if ranks != dist.get_world_size():  # each rank's batches continue its own RNG stream
        raise ConfigError(
            f"{path}: saved by {ranks} rank(s), this job has {dist.get_world_size()}; "
            "resume with the same --nproc-per-node"
        )
    state = checkpoint_state(
        model, optimizer, 0
    )  # the initialised optimizer state: Adam's moments load into it
    dcp.load(state, storage_reader=SafeReader(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    torch.set_rng_state(state["rng"][f"rank{dist.get_rank()}"])
    return int(state["step"])


def injected(spec: str | None) -> tuple[str, int, int | None] | None:
    """`$LIFEBOAT_INJECT` (`nccl-error@N`, `cuda-error@N`, on every rank; `...@N:R` on rank R
    only) as (kind, step, rank or None), or None."""
    if not spec:
        return None
    kind, _, at = spec.partition("@")
    at, _, rank = at.partition(":")
    if kind not in INJECTABLE or not at.isdigit() or (rank and not rank.isdigit()):
        raise ConfigError(f"{INJECT_ENV}={spec!r}: use one of {', '.join(INJECTABLE)} then @STEP[:RANK]")
    return kind, int(at), int(rank) if rank else None


def fault_at(injection: tuple[str, int, int | None] | None, step: int) -> Exception | None:
    """The error an NCCL or CUDA failure raises in torch, at the injected step and rank(s)."""
    if not _here(injection, ("nccl-error", "cuda-error"), step):
        return None
    if injection[0] == "nccl-error":
        return dist.DistBackendError(
            f"NCCL error in: ProcessGroupNCCL.cpp, remote process exited or there was a network error "
            f"(injected by {INJECT_ENV} at step {step})"
        )
    return torch.AcceleratorError(
        f"CUDA error: an illegal memory access was encountered (injected at step {step})"
    )


def stop_at(injection: tuple[str, int, int | None] | None, kind: str, step: int) -> None:
    """SIGSTOP this rank where `$LIFEBOAT_INJECT` stops it (`stop` or `stop-in-save` at `step`)."""
    if _here(injection, (kind,), step):
        os.kill(os.getpid(), signal.SIGSTOP)


def _here(injection: tuple[str, int, int | None] | None, kinds: tuple[str, ...], step: int) -> bool:
    return (
        injection is not None
        and injection[0] in kinds
        and injection[1] == step
        and injection[2] in (None, dist.get_rank())
    )


def hang_rule(env=os.environ) -> HangRule:
    """The watchdog's bound: `$LIFEBOAT_HANG_MULTIPLE` x the recent median step, at least
    `$LIFEBOAT_HANG_FLOOR_S` (the runbook's `job.env` sets them)."""
    try:
        return HangRule(
            multiple=float(env.get("LIFEBOAT_HANG_MULTIPLE", "10")),
            floor_s=float(env.get("LIFEBOAT_HANG_FLOOR_S", "5")),
        )
    except ValueError as e:
        raise ConfigError(f"LIFEBOAT_HANG_MULTIPLE / LIFEBOAT_HANG_FLOOR_S: {e}") from None


def train(args) -> int:
    """Train to `args.steps` from scratch or `args.resume`; the step reached. Each save is
    committed under the epoch in $LIFEBOAT_EPOCH (0 under an audit: its folder is its own).
    A fault in a step ends the job through the guard (it exits the process with its code)."""
    epoch = 0 if args.audit else epoch_from_env()
    injection = injected(os.environ.get(INJECT_ENV))
    model, optimizer, target = build(args.seed)
    step = load_checkpoint(model, optimizer, committed_checkpoint(args.resume)) if args.resume else 0
    ckpt_dir = Path(args.ckpt_dir)
    lead = dist.get_rank() == 0  # rank 0 logs for the job

    def emergency_save(at: int, record: dict, group) -> None:
        path = save_checkpoint(model, optimizer, at, ckpt_dir, group)
        commit_save(ckpt_dir, path, at, epoch, record=record, group=group)

    log = RunLog(args.loss_log, args.heartbeat, echo=True) if lead else None
    guarded = os.environ.get("LIFEBOAT_GUARD", "on") != "off"
    guard = TrainingGuard(save=emergency_save, optimizer=optimizer, rule=hang_rule()) if guarded else None
    with log if log else contextlib.nullcontext(), guard or contextlib.nullcontext():
        if guard and args.resume:
            guard.committed(step)
        if args.resume and log:
            log.loaded(step)
        while step < args.steps:
            with guard.step(step + 1) if guard else contextlib.nullcontext():
                stop_at(injection, "stop", step + 1)
                loss = train_step(model, optimizer, target, fault_at(injection, step + 1))
            step += 1
            if log:
                log.step(step, loss)
            if args.every and step % args.every == 0:
                with guard.saving(step) if guard else contextlib.nullcontext():
                    stop_at(injection, "stop-in-save", step)
                    path = save_checkpoint(model, optimizer, step, ckpt_dir)
                    commit_save(ckpt_dir, path, step, epoch, committed=guard.committed if guard else None)
            if args.step_seconds:
                time.sleep(args.step_seconds)
    return step


def die_with_launcher() -> None:
    """torchrun starts each rank in a session of its own, so SIGKILLing the job's process
    group (a lost node, `LocalCompute` teardown) would leave the ranks training on, orphaned.
    On Linux each rank asks for SIGKILL when its launcher dies, as a lost node would have it;
    a rank whose launcher is already gone (its parent is no longer torchrun) exits at once."""
    if not sys.platform.startswith("linux") or "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    try:
        parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        parent = b""
    if b"torchrun" not in parent and b"torch.distributed.run" not in parent:
        print("trainer: torchrun is gone; this rank stops", file=sys.stderr, flush=True)
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    args = parse_trainer_args(
        argv, prog="torchrun ... -m lifeboat_dr.standins.trainer.dcp", description=__doc__.splitlines()[0]
    )
    if "RANK" not in os.environ:
        print("trainer: start it under torchrun (torchrun --nproc-per-node 2 -m lifeboat_dr.standins.trainer.dcp ...)",
              file=sys.stderr)  # fmt: skip
        return 2
    die_with_launcher()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        step = train(args)
    except StopFailover as e:  # every rank stops; one says why
        if dist.get_rank() == 0:
            print(f"trainer: fenced out, exiting: {e}", file=sys.stderr, flush=True)
        return FENCED_EXIT
    except LifeboatError as e:
        print(f"trainer: rank {dist.get_rank()}: {e}", file=sys.stderr)
        return 1
    finally:
        dist.destroy_process_group()
    if int(os.environ["RANK"]) == 0:
        print(f"trainer: done at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
