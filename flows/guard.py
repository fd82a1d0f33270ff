"""One guard for every flow that acts: failover, failback, the serving failover, drills.

Whoever can start a flow run chooses its parameters (anyone holding Prefect's API can), so
before anything is fenced, provisioned or switched, `Guard` decides what the parameters may
do, and holds the runbook's lock while the run acts:

- `approval=approve` decides without a person: the console gate may only do that in a
  rehearsal on a sandbox (a dry run or a drill, which built the sandbox for this run) or for
  a training runbook that is a sandbox by what it names (every site `local` compute with a
  `file://` store: nothing it can touch is off this machine, e.g. `make demo`). Anywhere
  else it is refused at once, in one line. `reject` and `wait` may always be asked for: a
  refusal acts on nothing, and waiting asks a person.
- `rehearsal` is never a parameter: only code that built the run's own sandbox says so (the
  `failover` flow's dry run, the `drill` flow, which sandboxes every kind first: a drill is no
  parameter of `failover`).
- `force` (the outage taken as confirmed whatever the quorum says) is written in the ledger.
- the runbook's lock (`lifeboat_dr.core.lock`), held for the whole walk by every path that
  acts: one failover, failback or serving failover of a runbook at a time; another live
  holder stands this run down (`StandDown`). A lock taken from a holder whose lease lapsed
  is noted in the ledger, announced in chat and emitted as `lifeboat.lock.reclaimed`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

from lifeboat_dr.kernel.errors import ConfigError, LifeboatError, StandDown

log = logging.getLogger("lifeboat.guard")

ACTIONS = ("failover", "failback", "serving", "drill")
LOCK_LEASE_ENV = "LIFEBOAT_LOCK_LEASE"


def _stores_here(rb) -> bool:
    return all(urlparse(rb.store_uri(s.store)).scheme == "file" for s in (rb.primary, rb.secondary))


def on_this_machine(rb) -> bool:
    """Whether nothing `rb` can act on is off this machine: a training runbook whose sites are
    `local` compute with `file://` stores (a serving runbook moves clients' traffic: never)."""
    return rb.serving is None and _stores_here(rb) and rb.primary.infra == rb.secondary.infra == "local"


def console_mode(rb, approval: str | None, *, rehearsal: bool) -> str:
    """The console gate's mode for the `approval` parameter; `ConfigError` when it would have
    a parameter approve outside a sandbox."""
    if approval in (None, "wait", "reject"):
        return approval or "wait"
    if approval != "approve":
        raise ConfigError(f"approval={approval!r}: one of wait, approve, reject")
    if rehearsal or on_this_machine(rb):
        return "approve"
    raise ConfigError(
        f"runbook {rb.name}: approval=approve decides without a person; it is for dry runs, drills "
        "and runbooks whose every site is on this machine. Approve in Slack, the Prefect UI or with "
        "lifeboat approve."
    )


def lock_lease_s() -> float:
    """The lock's lease: `LIFEBOAT_LOCK_LEASE` seconds, else 60 (a dead holder's lock lapses
    one lease after its last renewal)."""
    from lifeboat_dr.core.lock import DEFAULT_LEASE_S

    value = os.environ.get(LOCK_LEASE_ENV)
    try:
        return float(value) if value else DEFAULT_LEASE_S
    except ValueError:
        raise ConfigError(f"{LOCK_LEASE_ENV}={value!r} is not a number of seconds") from None


class Guard:
    """The checks and the lock of one acting run of `rb` (see the module docstring).
    Constructing it checks the parameters (`ConfigError`); `acting` holds the lock.
    `rehearsal`: the caller built `rb` as this run's own sandbox."""

    def __init__(
        self,
        rb,
        run_id: str,
        *,
        action: str,
        approval: str | None = None,
        rehearsal: bool = False,
        force: bool = False,
    ):
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}")
        self.rb, self.run_id, self.action, self.force = rb, str(run_id), action, force
        self.console = console_mode(rb, approval, rehearsal=rehearsal)

    @contextmanager
    def acting(self, ledger, notify: Callable[[str], None] | None = None, *, store=None) -> Iterator[None]:
        """Hold the runbook's lock for the block (`StandDown` when another live run holds it).
        `store`: where the lock lives (default: the runbook's secondary store)."""
        from lifeboat_dr.core.lock import RunbookLock
        from lifeboat_dr.flows.wiring import open_site

        if self.force:
            ledger.note(
                "force",
                "started with force: the outage is taken as confirmed whatever the quorum says "
                "(by whoever started this run)",
            )
        lock = RunbookLock(
            store if store is not None else open_site(self.rb, self.rb.secondary),
            self.rb.name,
            self.run_id,
            action=self.action,
            lease_s=lock_lease_s(),
        )
        try:
            lock.acquire()
        except StandDown:
            raise
        except LifeboatError as e:  # the store did not answer, or cannot hold a lock: nothing acted
            ledger.fail("confirmed", f"could not take the runbook's lock: {e}")
            raise
        try:
            if lock.reclaimed is not None:
                self._alert(lock, ledger, notify)
            yield
        finally:
            lock.release()

    def _alert(self, lock, ledger, notify) -> None:
        gone = lock.reclaimed
        text = (
            f"Lifeboat: took the failover lock of {self.rb.name} from {gone.describe()}: it stopped "
            f"renewing it for a whole lease ({lock.lease_s:g}s), so it is gone (its worker died?)"
        )
        ledger.note("lock reclaimed", text)
        log.warning("%s", text)
        if notify is not None:
            notify(text)
        try:
            from lifeboat_dr.core.detection.events import runbook_resource
            from lifeboat_dr.providers.orchestrator.prefect_api import emit

            emit(
                "lifeboat.lock.reclaimed",
                runbook_resource(self.rb.name, None),  # no path: no automation reads it as an outage
                {
                    "runbook": self.rb.name,
                    "run_id": self.run_id,
                    "holder_run_id": getattr(gone, "run_id", None),
                    "holder": gone.describe(),
                },
            )
        except Exception as e:  # the ledger and the chat have it: an event is one more reader, never a stop
            log.warning("could not emit lifeboat.lock.reclaimed: %s", e)
