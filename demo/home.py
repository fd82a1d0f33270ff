"""Where the demo plays: the repository checkout it runs from (`make demo`), else, from an
installed wheel, `./lifeboat-demo` under the current folder with the shipped demo runbooks
copied into its `runbooks/`. The demo's runbooks keep their state beside them
(`../.lifeboat/demo`), and the installed package's folder is no place for it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
ROOT = CHECKOUT if (CHECKOUT / "pyproject.toml").exists() else Path.cwd() / "lifeboat-demo"


def enter() -> None:
    """Work from `ROOT`, with the demo runbooks in place."""
    if ROOT != CHECKOUT:
        from lifeboat_dr.runbooks.examples import examples

        (ROOT / "runbooks").mkdir(parents=True, exist_ok=True)
        for name, path in examples().items():
            if name.startswith("demo"):
                shutil.copyfile(path, ROOT / "runbooks" / path.name)
    os.chdir(ROOT)
