"""A sandbox for rehearsals: any runbook, rewritten onto this machine.

`sandboxed(rb, name)` keeps the runbook's policy (targets, approval, detection, verify) and
swaps its outside world for embedded counterparts under `.lifeboat/sandbox/<name>/`: `file://`
stores for both sites, local compute, and a tiny deterministic trainer as the job: the numpy
one (Lifeboat's manifest layout), or with `trainer="torch"` the PyTorch one under torchrun
(2 CPU ranks, DCP layout; `lifeboat_dr.standins.trainer.jobs`). `seed` then plays the pre-failure history: the
trainer runs on the "primary", its checkpoints are replicated to the "secondary", its losses
are logged for the parity gate. Dry runs and drills go through the real failover code path
on top of it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.runbooks.model import Runbook
from lifeboat_dr.standins.trainer.core import Trainer
from lifeboat_dr.standins.trainer.jobs import TrainerJob, trainer_job

SANDBOX_ROOT = Path(".lifeboat/sandbox")


@dataclass(frozen=True)
class Sandbox:
    root: Path

    @property
    def primary(self) -> Path:
        return self.root / "primary"

    @property
    def secondary(self) -> Path:
        return self.root / "secondary"

    @property
    def pre_failure_log(self) -> Path:
        return self.root / "primary-loss.jsonl"

    @property
    def weights(self) -> Path:
        return self.root / "weights"


def sandbox_of(name: str, root: Path = SANDBOX_ROOT) -> Sandbox:
    return Sandbox((root / name).resolve())


def sandboxed(
    rb: Runbook,
    name: str,
    *,
    steps: int = 40,
    every: int = 5,
    root: Path = SANDBOX_ROOT,
    trainer: str = "numpy",
    history: bool = True,
    keep: bool = False,
) -> Runbook:
    """The runbook rewritten into a fresh sandbox folder, with its history already played
    (`history=False`: empty sites, for a caller that plays it). `trainer`: the job, `numpy`
    or `torch` (lifeboat_dr.standins.trainer.jobs). `keep`: a re-run of the dry run that made
    the sandbox goes on in it as it is (its sites, its cluster and the job running there)."""
    # checkpoints at least parity_steps apart: the steps after the previous one are all in the
    # pre-failure log, so a rehearsal proves its resume (by its own steps or by a replay)
    every = max(every, rb.verify.parity_steps or 0)
    job = trainer_job(trainer)
    if why := job.missing():
        raise ConfigError(why)
    box = sandbox_of(name, root)
    kept = keep and box.primary.exists()
    if box.root.exists() and not kept:
        shutil.rmtree(box.root)
    box.root.mkdir(parents=True, exist_ok=True)
    # checkpoints go to $LIFEBOAT_STORE (the site it resumes on: the secondary, or the primary
    # on a failback), the loss log beside them
    command = job.command(
        steps=steps + 2 * every,
        every=every,
    )
    weights = []
    for i, uri in enumerate(rb.prestage.weights):
        folder = box.weights / f"w{i}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SOURCE").write_text(f"sandbox stand-in for {uri}\n")
        weights.append(f"file://{folder}")
    doc = rb.model_dump(mode="json", exclude={"job"})
    doc["primary"] = {"infra": "local", "store": f"file://{box.primary}"}
    doc["secondary"] = {
        "infra": "local",
        "store": f"file://{box.secondary}",
        "candidates": [{"infra": "local"}],
    }
    doc["job"] = {"command": command, "resume": {"arg": "--resume {checkpoint}"}}
    doc["checkpoint"] = {**doc["checkpoint"], "layout": job.layout}
    doc["prestage"] = {**doc["prestage"], "weights": weights}
    doc["verify"] = {**doc["verify"], "loss_log": str(box.pre_failure_log)}
    doc["detection"] = {**doc["detection"], "heartbeat": None}
    sandbox = Runbook.model_validate(doc)
    sandbox._path = box.root / f"{rb.name}.yaml"
    if history and not kept:
        seed(sandbox, box, job, steps=steps, every=every)
    return sandbox


def seed(rb: Runbook, box: Sandbox, job: TrainerJob, *, steps: int, every: int) -> None:
    """Train on the primary until it dies 3 steps after its last checkpoint (work the resumed
    job must redo, and whose losses the parity gate compares), then replicate every
    committed checkpoint."""
    from lifeboat_dr.core.checkpoints.inventory import stored_checkpoints
    from lifeboat_dr.core.replication.copying import replicate_checkpoints
    from lifeboat_dr.flows.wiring import open_sites

    heartbeat = box.root / "primary-heartbeat.json"
    if job.name == "numpy":  # in process: no interpreter to start, the same maths
        Trainer(box.primary, box.pre_failure_log, heartbeat=heartbeat).run(steps + 3, every)
    else:
        job.run(
            steps=steps + 3,
            every=every,
            ckpt_dir=box.primary,
            loss_log=box.pre_failure_log,
            heartbeat=heartbeat,
        )
    primary, secondary = open_sites(rb)
    replicate_checkpoints(
        primary, secondary, stored_checkpoints(primary, job.layout), rpo_target=rb.rpo_target
    )


def sandbox_images(rb: Runbook) -> dict[str, str]:
    """What a sandbox registry holds: every prestaged image, at its expected digest."""
    return {i.image: i.digest or "sha256:" + "0" * 64 for i in rb.prestage.images}
