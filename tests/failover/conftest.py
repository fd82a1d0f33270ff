import pytest
from prefect.testing.utilities import prefect_test_harness


@pytest.fixture(scope="session")
def prefect_server():
    """A real, temporary Prefect server (SQLite) for the whole session."""
    with prefect_test_harness(server_startup_timeout=120):
        yield
