"""Suite-wide settings and the one Prefect server the suite shares.

No telemetry, nothing reaching the internet. Tests that need Prefect ask for
`prefect_server`: a real temporary server (SQLite), started once for the session on first
use, so every area's events, deployments and automations land on the same server.
"""

import os

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")


@pytest.fixture(scope="session")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
