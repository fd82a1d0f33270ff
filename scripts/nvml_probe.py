#!/usr/bin/env python
"""Print this host's GPU health as JSON, exactly as the watch flow's gpu_health probe sees it.

    python scripts/nvml_probe.py [--xid-wait-ms 2000] [--expected-gpus 8]

Exit status: 0 healthy, 1 degraded (the probe would vote "outage"), 2 no driver or NVML
unavailable (the probe would not vote). Safe on any host: no GPU means a JSON answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lifeboat_dr.core.detection.probes import GpuHealthReadingProbe  # noqa: E402
from lifeboat_dr.providers.health.nvml import NvmlHealth  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--xid-wait-ms", type=int, default=0, help="listen for XID events this long (0: drain)")
    p.add_argument("--expected-gpus", type=int, help="fewer visible GPUs counts as a problem")
    args = p.parse_args(argv)
    probe = NvmlHealth(xid_wait_ms=args.xid_wait_ms, expected_gpus=args.expected_gpus)
    health = probe.check()
    reading = GpuHealthReadingProbe(_Fixed(health)).check()
    print(json.dumps({"health": health.to_dict(), "reading": reading.to_dict()}, indent=2))
    return {"ok": 0, "degraded": 1}.get(health.state, 2)


class _Fixed:
    """Hands the already-taken snapshot to the reading probe (one NVML session, not two)."""

    def __init__(self, health):
        self.health, self.host = health, health.host

    def check(self):
        return self.health


if __name__ == "__main__":
    sys.exit(main())
