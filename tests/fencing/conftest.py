"""Stores the fencing suite runs against: each backend is one fixture param.

Every backend here honours preconditions. The GCS emulator does not (it ignores
`ifGenerationMatch`, see DESIGN.md), so racing against it would "prove" two winners:
GCS fencing is tested on the GCS fake, which enforces generations like real GCS does.
"""

from __future__ import annotations

import pytest

from providers.storage.local import LocalStore


@pytest.fixture(params=["local"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "secondary")
    raise AssertionError(request.param)
