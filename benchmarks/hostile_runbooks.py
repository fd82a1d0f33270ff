"""Hostile runbooks through `load_runbook`: time and peak memory until the refusal.

Each file is refused with one `file:line: field: message` problem; this measures how long
that takes (median of 5) and the peak Python allocation while it happens (tracemalloc),
against loading the good example runbook. Target: every refusal within 1 s and 64 MiB.

    python -m benchmarks hostile_runbooks
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from benchmarks._goals import goal

TARGET_S = 1.0
TARGET_MIB = 64
GOOD = Path(__file__).resolve().parent.parent / "runbooks" / "mistral-7b-sft.yaml"


def _cases() -> dict[str, bytes]:
    good = GOOD.read_text()
    bomb = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        bomb += f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    return {
        "alias bomb (9^9)": bomb.encode(),
        "20,000-deep flow nesting": (good + "zz: " + "[" * 20_000 + "]" * 20_000 + "\n").encode(),
        "self-referencing alias": (good + "zz: &x [*x]\n").encode(),
        "20,000 list items": ("name: x\nlist:\n" + "  - a\n" * 20_000).encode(),
        "50 MB file": (good + "#" + "x" * (50 << 20) + "\n").encode(),
        "250 KB string": (good + "zz: " + "x" * 250_000 + "\n").encode(),
        "5,000-digit integer": (good + "zz: " + "9" * 5000 + "\n").encode(),
    }


def _measure(path: Path) -> tuple[float, float, str]:
    from lifeboat_dr.runbooks.loader import RunbookInvalid, load_runbook

    times, outcome = [], "ok"
    for _ in range(5):
        started = time.perf_counter()
        try:
            load_runbook(path)
        except RunbookInvalid as e:
            outcome = str(e.problems[0]).removeprefix(str(path))[:70]
        times.append(time.perf_counter() - started)
    tracemalloc.start()
    with contextlib.suppress(RunbookInvalid):
        load_runbook(path)
    peak = tracemalloc.get_traced_memory()[1] / (1 << 20)
    tracemalloc.stop()
    return statistics.median(times), peak, outcome


def main() -> None:
    import lifeboat_dr.runbooks.loader  # noqa: F401  (import time is not the loader's)

    good_s, good_mib, outcome = _measure(GOOD)
    print(f"{'good runbook (baseline)':28s} {good_s * 1000:8.1f} ms  peak {good_mib:6.2f} MiB  {outcome}")
    worst_s = worst_mib = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in _cases().items():
            path = Path(tmp) / "rb.yaml"
            path.write_bytes(content)
            seconds, mib, outcome = _measure(path)
            worst_s, worst_mib = max(worst_s, seconds), max(worst_mib, mib)
            print(f"{name:28s} {seconds * 1000:8.1f} ms  peak {mib:6.2f} MiB  {outcome}")
    goal(
        "hostile_runbooks worst refusal",
        worst_s <= TARGET_S and worst_mib <= TARGET_MIB,
        f"{worst_s * 1000:.0f} ms, {worst_mib:.1f} MiB",
        f"the good runbook's {good_s * 1000:.1f} ms, {good_mib:.2f} MiB",
        f"<= {TARGET_S:.0f} s and {TARGET_MIB} MiB",
    )


if __name__ == "__main__":
    main()
