"""`lifeboat certify` in the outage against `lifeboat certify` with the primary up (#31).

The CLI, a process per run, as an on-call runs it, at 1,000, 10,000 and 100,000 objects in one
checkpoint (manifest and replication receipt; the replica and the source on the counting moto
server, benchmarks/_s3server.py). The same runbook four ways, in the same round:

  up                 the primary's store answers (certified against its listing: ETags)
  refused            its endpoint is a port nothing listens on
  hanging            its endpoint accepts and never answers (testing/emulators.py HangingServer)
  hanging, confirmed the same, with `--primary-down`: the outage is confirmed, it is not asked

Rounds are interleaved (5, 3 at 100k; each case once per round) and each outage case is divided by the
`up` run of its own round; the figure is the median of those paired ratios. Product defaults
throughout: the store deadline (30 s), the probe deadline (`LIFEBOAT_PROBE_DEADLINE`, 2 s).

Goals: refused and hanging-confirmed <= 1.2x up; hanging (not confirmed) at most one probe
deadline over up (it is asked once, within it, while the replica is listed: below ~2 s of
certification that shows as a ratio, so its ratio is printed beside, not judged).
`LIFEBOAT_BENCH_QUICK=1`: 1,000 and 10,000 objects only.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._goals import goal
from benchmarks.certify import STEP, _scale_fixture

ROOT = Path(__file__).resolve().parents[1]
SIZES = (1_000, 10_000) if os.environ.get("LIFEBOAT_BENCH_QUICK") == "1" else (1_000, 10_000, 100_000)
ROUNDS = 5  # 3 at 100,000 objects (a round there is ~2 min on the shared machine)
GOAL = 1.2
CASES = ("up", "refused", "hanging", "hanging, confirmed")

RUNBOOK = """\
name: outage-bench
workload: finetuning
targets: {{rpo: 1000d}}
primary: {{infra: local, store: "s3://scale-source/run", endpoint_url: "{primary}"}}
secondary: {{infra: local, store: "s3://scale-replica/run", endpoint_url: "{secondary}", candidates: [{{infra: local}}]}}
job: {{command: "python train.py"}}
checkpoint: {{layout: manifest, cadence: 10m}}
"""


def _certify(runbook: Path, env: dict[str, str], *extra: str) -> tuple[float, float, dict]:
    """Wall and CPU seconds of one `lifeboat certify --json`, and its report (certified the
    step, or raise). On a busy machine the wall time measures the neighbours too; the CPU
    time is what the process itself spent."""
    argv = [sys.executable, "-m", "lifeboat_dr", "certify", str(runbook), "--json", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    run = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if run.returncode != 0:
        raise AssertionError(f"{runbook.name}: exit {run.returncode}: {run.stderr.strip()[-600:]}")
    report = json.loads(run.stdout)
    if (report["certified"] or {}).get("step") != STEP:  # a run that stopped early is no figure
        raise AssertionError(f"{runbook.name}: certified {report['certified']}, not step {STEP}")
    return wall, cpu, report


def _size(server, n: int, hanging_url: str, env: dict[str, str], where: Path) -> dict[str, float]:
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import dead_port

    server.reset()
    started = time.perf_counter()
    _scale_fixture(server, S3Store, n)
    setup = time.perf_counter() - started
    endpoints = {"up": server.url, "refused": dead_port(), "hanging": hanging_url}
    books = {}
    for case, endpoint in endpoints.items():
        books[case] = where / f"{case}-{n}.yaml"
        books[case].write_text(RUNBOOK.format(primary=endpoint, secondary=server.url))
    books["hanging, confirmed"] = books["hanging"]
    walls: dict[str, list[float]] = {case: [] for case in CASES}
    cpus: dict[str, list[float]] = {case: [] for case in CASES}
    modes, loads = {}, []
    for _ in range(ROUNDS if n < 100_000 else 3):
        loads.append(os.getloadavg()[0])
        for case in CASES:
            extra = ("--primary-down",) if case == "hanging, confirmed" else ()
            wall, cpu, report = _certify(books[case], env, *extra)
            walls[case].append(wall)
            cpus[case].append(cpu)
            modes[case] = report["mode"]
    up = walls["up"]
    print(
        f"  {n:>7,} objects (set-up {setup:.0f}s; load average {min(loads):.1f}-{max(loads):.1f})"
        f"\n    {'up':<20} {statistics.median(up):6.2f} s  {statistics.median(cpus['up']):5.2f} s CPU"
        f"  mode {modes['up']}"
    )
    ratios = {}
    for case in CASES[1:]:
        paired = sorted(w / u for w, u in zip(walls[case], up, strict=True))
        over = statistics.median(w - u for w, u in zip(walls[case], up, strict=True))
        cpu = statistics.median(cpus[case]) / statistics.median(cpus["up"])
        ratios[case] = (statistics.median(paired), over, cpu)
        print(
            f"    {case:<20} {statistics.median(walls[case]):6.2f} s  {statistics.median(cpus[case]):5.2f} s CPU"
            f"  {ratios[case][0]:.2f}x up ({paired[0]:.2f}-{paired[-1]:.2f}), {over:+.2f} s  mode {modes[case]}"
        )
    return ratios


def main() -> None:
    from benchmarks._s3server import counted_s3
    from lifeboat_dr.flows.wiring import probe_deadline
    from lifeboat_dr.testing.emulators import HangingServer

    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for name in ("LIFEBOAT_STORE_DEADLINE", "LIFEBOAT_PROBE_DEADLINE"):
        env.pop(name, None)  # the product's defaults
    os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    probe = probe_deadline()
    results = {}
    print(f"lifeboat certify with the primary down vs up, CLI, {ROUNDS} interleaved rounds, paired medians")
    with (
        counted_s3(indexed_list=True) as server,
        HangingServer() as hanging,
        tempfile.TemporaryDirectory() as d,
    ):
        for n in SIZES:
            results[n] = _size(server, n, hanging.url, env, Path(d))
    print(f"\ngoals: certify with the primary refused or hanging <= {GOAL}x certify with it up")
    for n, ratios in results.items():
        for case in ("refused", "hanging, confirmed"):
            ratio, _, cpu = ratios[case]
            goal(
                f"certify_outage {n // 1000}k {case}",
                ratio <= GOAL,
                f"{ratio:.2f}x wall (CPU {cpu:.2f}x)",
                "certify with the primary up",
                f"<= {GOAL}x",
            )
        ratio, over, cpu = ratios["hanging"]
        goal(
            f"certify_outage {n // 1000}k hanging, not confirmed",
            over <= probe,
            f"{over:+.2f} s, {ratio:.2f}x wall (CPU {cpu:.2f}x)",
            "certify with the primary up",
            f"at most one probe deadline over, {probe:g} s",
        )
    print(
        f"  (load average now {os.getloadavg()[0]:.1f}: wall ratios on a busy machine measure the neighbours too)"
    )


if __name__ == "__main__":
    main()
