"""What a test needs from the machine (a peer binary, root's network namespaces or mounts).

Where it is missing, the test skips, saying why; in CI (`CI=true`) it fails instead, saying
the same: `.ci/run` installs every peer, so a skip there would be a test that never ran
while the suite looked green.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def needs(missing: str | None) -> pytest.MarkDecorator:
    """A mark for a test that needs a peer: `missing` says why it is absent (None: present)."""
    if missing is not None and IN_CI:
        return pytest.mark.peer_missing(missing)  # tests/conftest.py fails the test at setup
    return pytest.mark.skipif(missing is not None, reason=missing or "")


def missing(why: str) -> NoReturn:
    """Inside a test or fixture, once it found its peer missing: skip, or fail in CI."""
    if IN_CI:
        pytest.fail(f"CI=true and {why}: .ci/run installs it", pytrace=False)
    pytest.skip(why)


def without(*commands: str) -> str | None:
    """Why the first of `commands` absent here is missing (each from Debian's package of that
    name, as .ci/run's PEERS installs it), or None when all are here."""
    for command in commands:
        if not (shutil.which(command) or os.path.exists(f"/usr/sbin/{command}")):
            return f"no {command} here (apt-get install {command})"
    return None
