"""RPO with the training guard and without (issue #33): the torch demo under torchrun
(2 CPU ranks, gloo), one fault per run, the same run with `$LIFEBOAT_GUARD=off` beside it.

Faults: `nccl-error` and `cuda-error` (every rank raises at step F, `$LIFEBOAT_INJECT`) and
`sigstop` (rank 1 SIGSTOPped after step F-1 is logged: raises nothing). Checkpoints every
EVERY steps, a step about STEP_S s (the trainer's sleep). Printed per run: exit code; the
checkpoint a resume starts from; RPO in steps (last step completed before the fault minus
it) and seconds (the training time lost: that step's log time minus the resumed step's); for
the watchdog, how long the hung step had run when it fired and its bound; and how long from the fault (the injected step's start, or the SIGSTOP) to the job's end —
an unguarded hang is given HANG_CAP_S and then killed (gloo's own timeout is 30 min, NCCL's 10).
`python -m benchmarks guard_rpo` (`--quick`: a shorter cap).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUICK = bool(os.environ.get("LIFEBOAT_BENCH_QUICK"))
STEPS, EVERY, FAULT_STEP, STEP_S = 30, 10, 18, 0.2
HANG_CAP_S = 20.0 if QUICK else 60.0
FLOOR_S = 2.0
REPO = Path(__file__).resolve().parents[1]


def _losses(log: Path) -> dict[int, float]:
    from lifeboat_dr.core.resume import parse_losses

    return parse_losses(log.read_text() if log.exists() else "")


def _step_times(log: Path) -> dict[int, float]:
    lines = (json.loads(x) for x in (log.read_text().splitlines() if log.exists() else ()))
    return {d["step"]: d["ts"] for d in lines if "loss" in d}


def one_run(root: Path, fault: str, guarded: bool) -> dict:
    from lifeboat_dr.standins.trainer.jobs import TRAINERS, rank_pid

    ckpt, log = root / "ckpt", root / "loss.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIFEBOAT_")}
    env |= {
        "PYTHONPATH": str(REPO),
        "LIFEBOAT_HANG_FLOOR_S": str(FLOOR_S),
        "LIFEBOAT_GUARD_EVENTS": str(root / "ev"),
    }
    env["LIFEBOAT_GUARD"] = "on" if guarded else "off"
    if fault != "sigstop":
        env["LIFEBOAT_INJECT"] = f"{fault}@{FAULT_STEP}"
    argv = TRAINERS["torch"].argv(steps=STEPS, every=EVERY, ckpt_dir=ckpt, loss_log=log, step_seconds=STEP_S)
    job = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    while job.poll() is None and max(_losses(log), default=0) < FAULT_STEP - 1:
        time.sleep(0.01)
    if fault == "sigstop":
        os.kill(rank_pid(str(ckpt), 1), signal.SIGSTOP)
    faulted_at = time.time() if fault == "sigstop" else None
    try:
        _, err = job.communicate(timeout=HANG_CAP_S)
        ended, code = time.time(), job.returncode
    except subprocess.TimeoutExpired:
        job.kill()
        for rank in (0, 1):
            if (pid := rank_pid(str(ckpt), rank)) is not None:
                os.kill(pid, signal.SIGKILL)
        job.communicate()
        ended, code = None, "hung"
    times = _step_times(log)
    last = max(times)
    if faulted_at is None:  # the injected step starts after the last logged one and its sleep
        faulted_at = times[FAULT_STEP - 1] + STEP_S
    newest = TRAINERS["torch"].newest_committed(ckpt)
    resume = int(newest.name.split("-")[1]) if newest else 0
    marker = json.loads((newest / "lifeboat-commit.json").read_text()) if newest else {}
    events = [json.loads(x) for x in (root / "ev").read_text().splitlines()] if (root / "ev").exists() else []
    hang = next((e["payload"] for e in events if e["payload"]["kind"] == "hang"), None)
    return {
        "fault": fault,
        "guard": "on" if guarded else "off",
        "exit": code,
        "resume_from": resume,
        "emergency": "emergency" in marker,
        "rpo_steps": last - resume,
        "rpo_s": times[last] - times[resume] if resume else None,
        "detected": f"{hang['elapsed']:.2f}/{hang['bound']:.2f}" if hang else "-",
        "ended_after_s": (ended - faulted_at) if ended else None,
    }


def main() -> None:
    print(f"load: {os.getloadavg()[0]:.2f} (1 min); steps {STEPS}, every {EVERY}, fault at step {FAULT_STEP}, "
          f"step ~{STEP_S} s, watchdog floor {FLOOR_S} s, hang cap {HANG_CAP_S:g} s")  # fmt: skip
    print(f"{'fault':<11} {'guard':<5} {'exit':>4} {'resume':>6} {'emerg':>5} {'RPO steps':>9} {'RPO s':>6} "
          f"{'hang s/bound':>12} {'ended after s':>13}")  # fmt: skip
    for fault in ("nccl-error", "cuda-error", "sigstop"):
        for guarded in (True, False):
            with tempfile.TemporaryDirectory() as tmp:
                r = one_run(Path(tmp), fault, guarded)
            ended = (
                f"{r['ended_after_s']:.2f}" if r["ended_after_s"] is not None else f">{HANG_CAP_S:g} (hung)"
            )
            rpo_s = f"{r['rpo_s']:.2f}" if r["rpo_s"] is not None else "-"
            print(f"{r['fault']:<11} {r['guard']:<5} {r['exit']!s:>4} {r['resume_from']:>6} {'yes' if r['emergency'] else 'no':>5} "
                  f"{r['rpo_steps']:>9} {rpo_s:>6} {r['detected']:>12} {ended:>13}", flush=True)  # fmt: skip


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
