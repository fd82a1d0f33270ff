"""`make demo`: validate and render the example runbooks (grows into the full failover demo)."""

from __future__ import annotations

import sys
from pathlib import Path

from lifeboat.cli import main as lifeboat

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    runbooks = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "runbooks").glob("*.yaml"))
    code = lifeboat(["validate", *runbooks])
    if code == 0:
        code = lifeboat(["render", "runbooks/demo.yaml"])
    return code


if __name__ == "__main__":
    sys.exit(main())
