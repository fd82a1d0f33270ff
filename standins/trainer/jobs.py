"""The demo trainers as jobs: how to start one, which layout it writes, what commits a step.

`numpy` is `python -m lifeboat_dr.standins.trainer` (Lifeboat's manifest layout, no extra needed); `torch`
is torchrun (`lifeboat_dr.standins.trainer.torchrun`: a fenced-out job exits 75 quietly)
`--standalone --nproc-per-node 2 -m lifeboat_dr.standins.trainer.dcp` (DCP layout, the `torch`
extra). Both take the same flags and print the same log lines, so the demo, the
sandbox and the process-kill drill run either. Nothing here imports torch.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME
from lifeboat_dr.core.fencing import COMMIT_MARKER
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.standins.trainer.core import newest_committed


@dataclass(frozen=True)
class TrainerJob:
    name: str  # numpy | torch
    layout: str  # the checkpoint layout its saves have (runbook checkpoint.layout)
    commit_marker: str  # the file that commits a step-N/ folder, written last
    launcher: tuple[str, ...]  # interpreter arguments before the trainer's own flags
    needs: str | None = None  # a module it imports that may not be installed

    def missing(self) -> str | None:
        """Why this trainer cannot run here (its framework is not installed), or None."""
        if self.needs and importlib.util.find_spec(self.needs) is None:
            return f"the {self.name} trainer needs {self.needs}: pip install -e '.[{self.name}]'"
        return None

    def argv(
        self,
        *,
        steps: int,
        every: int,
        ckpt_dir: str | Path | None = None,
        loss_log: str | Path | None = None,
        heartbeat: str | Path | None = None,
        step_seconds: float = 0.0,
        resume: str | None = None,
        python: str = sys.executable,
    ) -> list[str]:
        """The command line of a run (`python` first: the job's environment). Without
        `ckpt_dir` the checkpoints go to $LIFEBOAT_STORE (the site a failover resumes on) and the
        loss log beside them."""
        args = [python, *self.launcher, "--steps", str(steps), "--every", str(every)]
        if ckpt_dir is not None:
            args += ["--ckpt-dir", str(ckpt_dir)]
        if loss_log is not None:
            args += ["--loss-log", str(loss_log)]
        if heartbeat is not None:
            args += ["--heartbeat", str(heartbeat)]
        if step_seconds:
            args += ["--step-seconds", str(step_seconds)]
        if resume is not None:
            args += ["--resume", resume]
        return args

    def command(self, **kwargs) -> str:
        """`argv` as one shell line (a runbook's `job.command`)."""
        return shlex.join(self.argv(**kwargs))

    def start(
        self, *, log: str | Path | None = None, env: Mapping[str, str] | None = None, **kwargs
    ) -> subprocess.Popen:
        """Start a run in its own process group (SIGKILL the group to lose the "node");
        `env` is added to this process's environment."""
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
        try:
            return subprocess.Popen(
                self.argv(**kwargs),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **env} if env else None,
            )
        finally:
            if log:
                out.close()  # the child holds its own descriptor

    def run(self, *, timeout_s: float = 300, **kwargs) -> None:
        """Run to the end; a failed run raises with the tail of its output."""
        done = subprocess.run(self.argv(**kwargs), capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
            raise RuntimeError(f"the {self.name} trainer exited {done.returncode}: " + " | ".join(tail))

    def newest_committed(self, ckpt_dir: str | Path) -> Path | None:
        """The newest committed `step-N/` under `ckpt_dir`, or None."""
        return newest_committed(ckpt_dir, self.commit_marker)


def rank_pid(marker: str | Path, rank: int) -> int | None:
    """The pid of the live torch trainer rank `rank` (torchrun's $RANK) whose command line
    names `marker` (its checkpoint folder), or None. Linux (/proc); for drills and tests."""
    for proc in Path("/proc").iterdir():
        try:
            cmd, env = (proc / "cmdline").read_bytes(), (proc / "environ").read_bytes()
        except OSError:
            continue
        if (
            str(marker).encode() in cmd
            and b"trainer.dcp" in cmd
            and f"\0RANK={rank}\0".encode() in b"\0" + env
        ):
            return int(proc.name)
    return None


TRAINERS = {
    "numpy": TrainerJob("numpy", "manifest", MANIFEST_NAME, ("-m", "lifeboat_dr.standins.trainer")),
    "torch": TrainerJob(
        "torch",
        "dcp",
        COMMIT_MARKER,  # rank 0's guarded commit, after every rank saved and .metadata
        (
            "-m",
            "lifeboat_dr.standins.trainer.torchrun",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "lifeboat_dr.standins.trainer.dcp",
        ),
        needs="torch",
    ),
}


def trainer_job(name: str) -> TrainerJob:
    try:
        return TRAINERS[name]
    except KeyError:
        raise ConfigError(f"unknown trainer {name!r}; use one of {', '.join(TRAINERS)}") from None
