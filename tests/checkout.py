"""Tests that share state kept in the checkout itself, so `make test`'s pytest-xdist runs them
one at a time on one worker (tests/conftest.py's scheduler): the demo's sites, lock and Prefect
home (`.lifeboat/demo/`: runbooks/demo.yaml's stores, wherever it runs from), the plan that
`lifeboat deploy` writes and reads back (`.lifeboat/deploy/prefect.yaml`), and process workers
running flows from the repository root (a failover the automation starts there takes the
demo's lock). A test file or a test, by node id.
"""

SHARES_THE_CHECKOUT = (
    "tests/demo/test_demo.py",
    "tests/demo/test_failback_demo.py",
    "tests/topology/test_readme_deploy.py::test_readme_deploy_runs_watch_and_a_dry_run_failover_through_a_real_worker",
    "tests/topology/test_production_topology.py",
    "tests/approval/test_cancel_under_a_worker.py",
    "tests/detect/test_watch.py::test_the_demo_runbook_watches_its_heartbeat_checkpoints_and_store",
)


def group_of(nodeid: str) -> str:
    """The worker's unit of work a test belongs to: the checkout's, or its own file's."""
    if any(nodeid == n or nodeid.startswith((f"{n}::", f"{n}[")) for n in SHARES_THE_CHECKOUT):
        return "checkout"
    return nodeid.split("::", 1)[0]
