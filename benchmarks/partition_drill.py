"""The partition drill's figures: `lifeboat_dr.flows.drills.partition.drill` (the product's
`lifeboat drill --kind partition`), run once from here, each of its checks a goal line.

    python -m benchmarks partition_drill
"""

import json
import sys
import tempfile
from pathlib import Path

from benchmarks._goals import goal
from lifeboat_dr.flows.drills.partition.drill import main as drill


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="lifeboat-partition-bench-") as tmp:
        out = Path(tmp) / "result.json"
        drill(["--json", str(out)])
        if not out.exists():  # skipped (not root, no ip): the drill said why
            return
        for name, ok, detail in json.loads(out.read_text()).get("checks", []):
            goal(f"partition_drill {name}", ok, detail, "what the drill requires", "holds")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        drill(sys.argv[1:])  # --json F [--tag T] [--workdir D], as the product's drill takes them
    else:
        main()
