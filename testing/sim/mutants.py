"""Known bugs, put back on purpose: the simulator is trusted when it finds each of them.

| mutant                  | the bug                                                     |
|-------------------------|-------------------------------------------------------------|
| `partial-site-state`    | the site state read from the stores that answered (one store down is "no lease") |
| `no-recheck-before-commit` | a copy trusts the site state it planned with until its last marker lands |
| `seal-by-writer-clock`  | a sealed epoch's markers judged by the writer's own clock (`written_at`), not by sequence |

`mutated(name)` patches the running core for the length of the block. Each mutant wraps
the code that exists (whatever shape the fix of issue #27 gave it) rather than replacing
it with a copy of the old code: `partial-site-state` hands the real `read_site_state` only
the stores that answered; `no-recheck-before-commit` makes `Direction.guard` trust its
first reading and drops any keyword `copy_prefix` did not take before the fix (a re-check
passed in that way); `seal-by-writer-clock` replaces `marker_is_fenced_out`. When a fix
moves the behaviour elsewhere, the mutant must follow it (its test fails: the mutant no
longer bites).
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from lifeboat_dr.kernel.errors import ProviderUnavailable


@dataclass(frozen=True)
class Mutant:
    name: str
    about: str
    finds: frozenset[str]  # the invariants a history violates when the bug is back
    patch: Callable[[], list[tuple[object, str, object]]]  # (owner, attribute, replacement)


def _everywhere(original) -> list[tuple[object, str]]:
    """Every loaded lifeboat_dr module attribute bound to `original` (imported by name)."""
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("lifeboat_dr."):
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                found.append((module, attr))
    return found


def _partial_site_state():
    from lifeboat_dr.core import sitestate
    from lifeboat_dr.core.fencing import peek_lease

    real = sitestate.read_site_state
    # after #27 a view without every store (or a majority) is refused unless asked for as
    # `partial` (for display): the bug is acting on it
    partial = {"partial": True} if "partial" in inspect.signature(real).parameters else {}

    def read_site_state(stores, *args, **kwargs):
        answering = {}
        for role, store in stores.items():
            if store is None:
                continue
            try:
                peek_lease(store)
            except ProviderUnavailable:
                continue  # the bug: a store that does not answer is left out, not "unknown"
            answering[role] = store
        if not answering:
            raise ProviderUnavailable("no store answered")
        return real(answering, *args, **{**kwargs, **partial})

    return [(owner, attr, read_site_state) for owner, attr in _everywhere(real)]


_COPY_PREFIX_BEFORE_27 = frozenset(
    {
        "src",
        "dst",
        "src_prefix",
        "dst_prefix",
        "concurrency",
        "progress",
        "retry",
        "markers",
        "server_side",
        "dry_run",
        "trust_committed",
        "sources",
        "present",
    }
)


def _no_recheck():
    from lifeboat_dr.core import transfer
    from lifeboat_dr.core.replication.direction import Direction

    real_copy = transfer.copy_prefix
    known = set(inspect.signature(real_copy).parameters)

    def copy_prefix(*args, **kwargs):
        kwargs = {k: v for k, v in kwargs.items() if k in _COPY_PREFIX_BEFORE_27 or k not in known}
        return real_copy(*args, **kwargs)

    def guard(self, runbook, stores):  # the planning-time state, trusted to the end
        return lambda: None

    patches = [(owner, attr, copy_prefix) for owner, attr in _everywhere(real_copy)]
    return [*patches, (Direction, "guard", guard)]


def _seal_by_writer_clock():
    from lifeboat_dr.core import fencing

    real = fencing.marker_is_fenced_out

    def marker_is_fenced_out(marker: bytes, lease) -> bool:
        if lease is None:
            return False
        doc = json.loads(marker)
        epoch = int(doc.get("epoch", 0))
        if epoch >= lease.epoch:
            return False
        seal = lease.seal(epoch)
        if seal is None:
            return True
        written = doc.get("written_at")  # the bug: the writer's clock decides, never the sequence
        return written is None or datetime.fromisoformat(written) >= seal.ended_at

    return [(owner, attr, marker_is_fenced_out) for owner, attr in _everywhere(real)]


MUTANTS = {
    m.name: m
    for m in (
        Mutant(
            "partial-site-state",
            "read the site state from the one store that answered",
            frozenset({"fenced-out-copied", "active-overwritten", "newest-deleted", "none-certifiable"}),
            _partial_site_state,
        ),
        Mutant(
            "no-recheck-before-commit",
            "skip the site state's re-check before a copy's commit markers",
            frozenset({"active-overwritten", "fenced-out-copied"}),
            _no_recheck,
        ),
        Mutant(
            "seal-by-writer-clock",
            "seal the epoch by the writer's clock",
            frozenset(
                {"fenced-out-copied", "certified-bad", "resumed-bad", "newest-deleted", "none-certifiable"}
            ),
            _seal_by_writer_clock,
        ),
    )
}


@contextmanager
def mutated(name: str) -> Iterator[Mutant]:
    mutant = MUTANTS[name]
    patches = mutant.patch()
    if not patches:
        raise RuntimeError(f"mutant {name}: nothing to patch (the code it wraps is gone)")
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in patches]
    try:
        for owner, attr, value in patches:
            setattr(owner, attr, value)
        yield mutant
    finally:
        for owner, attr, value in reversed(saved):
            setattr(owner, attr, value)
