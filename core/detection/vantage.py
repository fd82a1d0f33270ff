"""Vantage points: "I cannot reach the primary" is a fact about a path, not about the primary.

A probe that cannot reach its target within its bounded timeout reads `unknown`: from one
place, the broken link may be the observer's own (the control plane's NIC, its NAT, its
region). The same probe run from a second, independent vantage point (the secondary site)
tells the two apart. The rule, per probe:

- Any vantage that got an answer decides: its reading (ok, or a real failing answer such as a
  stale heartbeat) stands, and the vantages that could not reach the target are not heard.
- No vantage got an answer: when `need` (2) or more distinct vantages each timed out or were
  refused, the probe reads `failing`, its evidence naming every vantage, what it saw, how
  long it waited and the `target` it could not reach; fewer stay `unknown` (no vote), saying
  which vantage was alone. The quorum counts one vote per unreachable target
  (`Reading.independent_source`), however many probes read it.

Readings are tagged with `at_vantage` (source `<probe>@<vantage>`, evidence `vantage`,
`probe`, `took_s`); untagged readings pass through untouched. `VantageProbe` runs a probe at
this vantage under a hard wall-clock bound. Plain Python: how a remote vantage's readings
arrive (a command run there, the shared signal log) is the providers' business.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from lifeboat_dr.core.detection.signals import Reading, Status, utc_now

VANTAGES_NEEDED = 2


def at_vantage(reading: Reading, vantage: str, took_s: float) -> Reading:
    """`reading` as seen from `vantage`, which took `took_s` to get it."""
    evidence = {**reading.evidence, "vantage": vantage, "probe": reading.source, "took_s": round(took_s, 2)}
    return dataclasses.replace(reading, source=f"{reading.source}@{vantage}", evidence=evidence)


def reached(reading: Reading) -> bool:
    """False when the observer could not reach the target (timed out, refused)."""
    return not (reading.status is not Status.ok and reading.evidence.get("unreachable") is True)


class VantageProbe:
    """Runs `probe` at `vantage`, tagged; past `bound_s` of wall time it reads `unknown`,
    unreachable, whatever the probe's own timeouts (the probe's thread is left to finish)."""

    def __init__(self, probe: Any, vantage: str, *, bound_s: float):
        self.probe, self.vantage, self.bound_s = probe, vantage, bound_s
        self.signal, self.source = probe.signal, f"{probe.source}@{vantage}"
        self.target = getattr(probe, "target", None)

    def check(self, previous: Reading | None = None) -> Reading:
        box: list[Reading | BaseException] = []

        def run() -> None:
            try:
                box.append(self.probe.check(previous))
            except BaseException as e:  # reported as the reading below
                box.append(e)

        started = time.monotonic()
        worker = threading.Thread(target=run, name=f"probe-{self.signal}", daemon=True)
        worker.start()
        worker.join(self.bound_s)
        took = time.monotonic() - started
        if not box:
            reading = Reading(
                self.signal,
                self.probe.source,
                Status.unknown,
                utc_now(),
                f"no answer within {self.bound_s:g} s",
                {"unreachable": True, "error": f"timed out after {took:.1f} s"}
                | ({"target": self.target} if self.target else {}),
            )
        elif isinstance(box[0], BaseException):
            e = box[0]
            reading = Reading(
                self.signal,
                self.probe.source,
                Status.unknown,
                utc_now(),
                f"probe error: {e}",
                {"error": str(e)},
            )
        else:
            reading = box[0]
        return at_vantage(reading, self.vantage, took)


def _vantage_line(r: Reading) -> str:
    took = r.evidence.get("took_s")
    return f"{r.evidence['vantage']} ({r.summary}{f', {took:g} s' if took is not None else ''})"


def _combined(probe: str, readings: list[Reading], need: int) -> Reading:
    vantages = sorted({r.evidence["vantage"] for r in readings})
    seen = [
        {
            "vantage": r.evidence["vantage"],
            "status": r.status.value,
            "summary": r.summary,
            "took_s": r.evidence.get("took_s"),
            "at": r.at.isoformat(),
        }
        for r in readings
    ]
    evidence: dict[str, Any] = {"unreachable": True, "vantages": seen, "need": need}
    targets = sorted({r.evidence["target"] for r in readings if isinstance(r.evidence.get("target"), str)})
    if targets:  # the vantages run one runbook, so one target; two (a stale copy) name both
        evidence["target"] = "+".join(targets)
    since = [r.evidence["since"] for r in readings if r.evidence.get("since")]
    if since:
        evidence["since"] = min(since)
    lines = " and ".join(_vantage_line(r) for r in readings)
    at = max(r.at for r in readings)
    signal = readings[0].signal
    if len(vantages) >= need:
        summary = f"unreachable from {len(vantages)} vantage points: {lines}"
        return Reading(signal, probe, Status.failing, at, summary, evidence)
    summary = (
        f"unreachable from {lines} only: no vote, that vantage's own link may be the broken one "
        f"({need} vantage points needed)"
    )
    return Reading(signal, probe, Status.unknown, at, summary, evidence)


def across_vantages(
    readings: Iterable[Reading], now: datetime, window: timedelta, *, need: int = VANTAGES_NEEDED
) -> list[Reading]:
    """Untagged readings unchanged; each tagged probe folded by the rule in the module
    docstring from its latest live reading per vantage. The vantages that got an answer keep
    their whole history (so a flapping answer is damped as any signal's is)."""
    plain: list[Reading] = []
    history: dict[str, dict[str, list[Reading]]] = defaultdict(lambda: defaultdict(list))
    for r in sorted(readings, key=lambda r: r.at):
        vantage = r.evidence.get("vantage")
        if vantage is None:
            plain.append(r)
        elif r.at <= now:
            history[r.evidence.get("probe", r.source)][vantage].append(r)
    for probe, by_vantage in sorted(history.items()):
        latest = {v: rs[-1] for v, rs in sorted(by_vantage.items()) if now - rs[-1].at <= window}
        answered = [v for v, r in latest.items() if reached(r)]
        if answered:
            plain.extend(r for v in answered for r in by_vantage[v])
        elif latest:
            plain.append(_combined(probe, list(latest.values()), need))
    return plain
