"""Compute: what planning and a local resume cost, as ratios over a bare baseline.

- `lifeboat plan` cold (a fresh process: imports + SkyPilot optimizer over the shipped
  catalog) over a bare `python -c "import sky"`;
- warm in-process planning, per candidate;
- LocalCompute launch -> first resumed step seen through the job log (the RTO tail on the
  demo) over a bare subprocess running the same trainer to its first step;
- teardown of a running trainer's process group.
Medians of a few runs; nothing here asserts.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = 3


def _median(fn, runs: int = RUNS) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _env(runtime: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "LIFEBOAT_SKY_RUNTIME_DIR": runtime}


def bench_plan(runtime: str) -> None:
    env = _env(runtime)
    rb = str(REPO / "runbooks" / "llama-70b-pretrain.yaml")
    bare = _median(lambda: subprocess.run([sys.executable, "-c", "import sky"], env=env, check=True), runs=2)
    cold = _median(
        lambda: subprocess.run(
            [sys.executable, "-m", "lifeboat_dr", "plan", rb, "--json"],
            env=env,
            check=True,
            capture_output=True,
        ),
        runs=2,
    )
    print(f"  plan, cold process: {cold:.2f}s vs bare `import sky` {bare:.2f}s -> x{cold / bare:.2f}")

    os.environ["LIFEBOAT_SKY_RUNTIME_DIR"] = runtime
    from lifeboat_dr.kernel.errors import ConfigError
    from lifeboat_dr.providers.compute.base import PlanOption
    from lifeboat_dr.providers.compute.skypilot import SkyPilotCompute

    try:
        compute = SkyPilotCompute(offline=True)
    except ConfigError as e:  # `sky` already imported by an earlier benchmark with other catalogs
        print(f"  plan, warm in process: skipped ({e})")
        return
    options = [
        PlanOption("gcp/us-central1", None, "H100:8", False, None, 0),
        PlanOption("gcp/us-east4", None, "H100:8", False, None, 1),
        PlanOption("aws", None, "H100:8", True, None, 2),
    ]
    compute.plan(options, ["aws/us-east-1"])  # warm-up: imports and catalog reads
    warm = _median(lambda: compute.plan(options, ["aws/us-east-1"]), runs=5)
    print(
        f"  plan, warm in process: {warm * 1000 / len(options):.0f} ms per candidate ({len(options)} candidates)"
    )


def bench_resume(tmp: Path) -> None:
    from lifeboat_dr.core.resume import wait_first_step
    from lifeboat_dr.providers.compute.base import JobSpec, PlanOption
    from lifeboat_dr.providers.compute.local import LocalCompute
    from lifeboat_dr.standins.trainer import Trainer

    Trainer(tmp / "ckpt", tmp / "pre.jsonl").run(20, 10)
    ckpt = tmp / "ckpt" / "step-00000020"
    argv = [
        sys.executable,
        "-m",
        "lifeboat_dr.standins.trainer",
        "--steps",
        "400",
        "--every",
        "100",
        "--ckpt-dir",
        str(tmp / "out"),
        "--loss-log",
        str(tmp / "out.jsonl"),
        "--resume",
        str(ckpt),
    ]

    def bare() -> float:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=_env(""), cwd=tmp)
        proc.stdout.readline()
        took = time.perf_counter() - start
        proc.kill()
        proc.wait()
        return took

    compute = LocalCompute(tmp / "clusters")
    local = PlanOption("local", None, None, False, 0.0)
    job = JobSpec(
        name="bench",
        command=" ".join(argv[:-2]),
        workdir=tmp,
        env={"PYTHONPATH": str(REPO)},
        resume_env="LIFEBOAT_RESUME_FROM",
        checkpoint=f"file://{ckpt}",
    )
    teardowns = []

    def through_compute() -> float:
        start = time.perf_counter()
        compute.launch("bench", local, job)
        wait_first_step(lambda: compute.logs("bench"), 20, timeout_s=60, poll_s=0.01)
        took = time.perf_counter() - start
        start = time.perf_counter()
        compute.teardown("bench")
        teardowns.append(time.perf_counter() - start)
        return took

    b = statistics.median(bare() for _ in range(5))
    c = statistics.median(through_compute() for _ in range(5))
    print(
        f"  resume, launch -> first step: LocalCompute {c:.2f}s vs bare subprocess {b:.2f}s -> x{c / b:.2f}"
    )
    print(f"  teardown of a running trainer: {statistics.median(teardowns) * 1000:.0f} ms")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="lifeboat-bench-") as tmp:
        runtime = str(Path(tmp) / "sky")
        bench_plan(runtime)
        bench_resume(Path(tmp))


if __name__ == "__main__":
    main()
