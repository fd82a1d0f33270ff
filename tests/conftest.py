"""Suite-wide settings and the real protocol peers the suite shares.

No telemetry, nothing reaching the internet. Each peer starts once, on first use, on
127.0.0.1, and stops at the end of the session: `prefect_server` (a temporary Prefect server
on SQLite, so every area's events, deployments and automations land on one server),
`s3_endpoint` (moto's ThreadedMotoServer), `gcs_endpoint` (gcp-storage-emulator).
"""

import os
import tempfile

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
# Plans price over the shipped snapshot whatever the developer's own `sky check` enabled, and
# remembered plans and task verdicts stay out of the developer's cache.
os.environ.setdefault("LIFEBOAT_SKY_HOME", tempfile.mkdtemp(prefix="lifeboat-test-sky-home-"))
os.environ.setdefault("LIFEBOAT_CACHE_DIR", tempfile.mkdtemp(prefix="lifeboat-test-memo-"))


@pytest.fixture(scope="session")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def s3_endpoint():
    from providers.storage.testing import moto_server

    with moto_server() as url:
        yield url


@pytest.fixture(scope="session")
def gcs_endpoint():
    from providers.storage.testing import gcs_emulator

    with gcs_emulator() as url:
        yield url
