"""Tests that share state kept in the checkout itself, so they run one at a time on one worker
under `make test`'s pytest-xdist (their group, tests/conftest.py): the demo's sites, lock and
Prefect home (`.lifeboat/demo/`, runbooks/demo.yaml's stores wherever it runs from), the plan
`lifeboat deploy` writes and reads back (`.lifeboat/deploy/prefect.yaml`), and the workers that
run flows from the repository root (a failover the automation starts there holds the demo's lock).
"""

import pytest

shares_the_checkout = pytest.mark.xdist_group("checkout")
