"""Known bugs, put back on purpose: the simulator is trusted when it finds each of them.

| mutant                  | the bug                                                     |
|-------------------------|-------------------------------------------------------------|
| `partial-site-state`    | the site state read from the one store that answered (a view without the secondary's store taken as conclusive) |
| `no-recheck-before-commit` | a copy checks the site state before its first write, never again before its commit markers, and writes without preconditions (the copy in flight of #27) |
| `seal-by-writer-clock`  | a sealed epoch's markers judged by the writer's own clock (`written_at` against the seal's time), not by commit sequence |

`mutated(name)` patches the running core for the length of the block. Each mutant puts its
bug back into today's code at the one place that decides it, rather than restoring old
code: `partial-site-state` makes `SiteState.conclusive` true for any store that answered
(`read_site_state` then acts on the primary's old record when the secondary's store does
not answer); `no-recheck-before-commit` hands `copy_prefix` a `before_commit` that runs
only before the first write and a destination without preconditions (the markers land on
whatever the site state became: the conditional writes alone would stop them, which the
simulator shows; the re-check is what stops a server-side copy's unconditional data);
`seal-by-writer-clock` replaces `marker_is_fenced_out` wherever it is imported. When a
refactor moves the decision elsewhere, the mutant must follow it: its test fails (the
mutant no longer bites) instead of passing quietly.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime


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
    from lifeboat_dr.core.sitestate import SiteState

    # the bug: whichever store answered decides, as if a missing lease there were "no lease"
    return [(SiteState, "conclusive", property(lambda self: bool(self.answered)))]


class _Unconditional:
    """A store as a copy without preconditions writes to it (a server-side copy's data, a
    store that ignores them): every write lands, whatever the destination holds now."""

    def __init__(self, store):
        self.store = store
        self.capabilities = dataclasses.replace(store.capabilities, conditional_writes=False)

    def __getattr__(self, name):
        return getattr(self.store, name)


def _no_recheck():
    from lifeboat_dr.core import transfer

    real = transfer.copy_prefix

    def copy_prefix(src, dst, *args, before_commit=None, **kwargs):
        if before_commit is None:
            return real(src, dst, *args, **kwargs)
        calls = [0]

        def first_only() -> None:  # the bug: the state read before the data is trusted to the end
            calls[0] += 1
            if calls[0] == 1:
                before_commit()

        return real(src, _Unconditional(dst), *args, before_commit=first_only, **kwargs)

    return [(owner, attr, copy_prefix) for owner, attr in _everywhere(real)]


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
