"""The checkout's group (tests/checkout.py) names tests that exist: a renamed one would run on
any worker again, beside the others that share the demo's sites and lock."""

import ast
from pathlib import Path

from tests.checkout import SHARES_THE_CHECKOUT, group_of

ROOT = Path(__file__).resolve().parents[1]


def test_every_test_in_the_checkout_group_exists():
    missing = []
    for entry in SHARES_THE_CHECKOUT:
        path, _, name = entry.partition("::")
        if not (ROOT / path).is_file():
            missing.append(entry)
        elif name:
            tree = ast.parse((ROOT / path).read_text())
            if name not in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}:
                missing.append(entry)
    assert not missing, missing


def test_a_test_is_in_the_checkout_group_by_its_file_or_its_own_name():
    assert (
        group_of("tests/demo/test_demo.py::test_demo_kills_fails_over_and_proves_identical_losses")
        == "checkout"
    )
    assert (
        group_of("tests/detect/test_watch.py::test_seen_forgets_after_its_ttl")
        == "tests/detect/test_watch.py"
    )
    watched = "tests/detect/test_watch.py::test_the_demo_runbook_watches_its_heartbeat_checkpoints_and_store"
    assert group_of(watched) == "checkout"
    assert group_of(watched + "_too") == "tests/detect/test_watch.py"  # a prefix of a name is not the name
