"""Faults, per request, from the history's choices: a store, the compute API and the
ledger file seen through wrappers that make every call a yield point.

`FaultyStore` wraps one `MemoryStore` for every actor (the scheduler says who is calling).
Before each request the scheduler may run another actor; then the request may be refused
by a partition (the caller is outside the store's region while it is cut off: a timeout),
or meet one fault:

| fault      | what the caller sees                                                    |
|------------|-------------------------------------------------------------------------|
| error      | `ProviderUnavailable` at once (a 503 SlowDown past the client's retries) |
| timeout    | `ProviderUnavailable` after the store's deadline; nothing happened      |
| lost-reply | the write or delete landed, then `ProviderUnavailable` after the deadline |
| latency    | the request waits 1-8 s (other actors run meanwhile), then answers       |
| partial    | a read or list yields part of its answer, then the connection resets    |
| full       | a write is refused: `ProviderUnavailable` naming the object, as a full `file://` store does |
| crash      | the caller's process is killed here (SIGKILL): nothing more it does lands |
| throttled  | one hot key (the lease, the lock, the ledger chain) answers 503 to everyone for a window of the history (S3 SlowDown is per prefix): correlated, not per request |

Compute calls (`ComputeView`) meet error, lost-reply (launch, run, teardown), latency and
crash; the ledger file (`LedgerSink`) full (`WriteFailed`) and crash. Which faults each
request can meet is `FAULTS`; every one met is counted in the `Coverage`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from lifeboat_dr.kernel.errors import ProviderUnavailable, WriteFailed
from lifeboat_dr.testing.sim.scheduler import Killed

if TYPE_CHECKING:
    from lifeboat_dr.testing.memory_store import MemoryStore

DEADLINE_S = 5.0  # a store's deadline for one call (LIFEBOAT_STORE_DEADLINE), virtual seconds
LATENCY_S = 0.02  # what every request costs, virtual seconds
SLOW_S = (1.0, 2.0, 4.0, 8.0)  # the latency fault's extra wait

READS = ("error", "timeout", "latency", "partial")
WRITES = ("error", "timeout", "lost-reply", "latency", "full")
FAULTS: dict[str, tuple[str, ...]] = {
    "list": READS,
    "read": READS,
    "head": ("error", "timeout", "latency"),
    "put": WRITES,
    "delete": ("error", "timeout", "lost-reply", "latency"),
    "compute": ("error", "latency"),
    "compute-act": ("error", "lost-reply", "latency"),
    "ledger": ("full",),
}
ALL_FAULTS = (
    "error",
    "timeout",
    "lost-reply",
    "latency",
    "partial",
    "full",
    "crash",
    "partition",
    "throttled",
)


class Coverage:
    """Which (fault, actor kind, step) triples the histories reached, and how often; and
    which requests each (actor kind, step) made, so the faults it could have met are known."""

    def __init__(self) -> None:
        self.met: Counter[tuple[str, str, str]] = Counter()
        self.requests: Counter[tuple[str, str, str]] = Counter()  # (actor kind, step, op) -> requests
        self.hot: set[tuple[str, str]] = set()  # (actor kind, step) that asked for a hot key
        self.crossing: set[tuple[str, str]] = set()  # (actor kind, step) that asked across a cut

    def request(
        self, kind: str, phase: str, op: str, fault: str | None, hot: bool = False, crossing: bool = False
    ) -> None:
        self.requests[(kind, phase, op)] += 1
        if hot:
            self.hot.add((kind, phase))
        if crossing:
            self.crossing.add((kind, phase))
        if fault:
            self.met[(fault, kind, phase)] += 1

    def possible(self, crashable: set[str]) -> dict[tuple[str, str], set[str]]:
        """(actor kind, step) -> the faults its requests could meet."""
        out: dict[tuple[str, str], set[str]] = {}
        for kind, phase, op in self.requests:
            faults = out.setdefault((kind, phase), set())
            faults.update(FAULTS[op])
            if (kind, phase) in self.crossing:  # asked across the primary region's cut-off
                faults.add("partition")
            if (kind, phase) in self.hot:
                faults.add("throttled")
            if kind in crashable:
                faults.add("crash")
        return out

    def merge(self, other: Coverage) -> None:
        self.met.update(other.met)
        self.requests.update(other.requests)
        self.hot |= other.hot
        self.crossing |= other.crossing


def _fault(world, op: str, site: str | None, key: str) -> str | None:
    """Decide this request's fault (or None) for the current actor; a crash kills it here."""
    actor = world.sched.current
    if world.scenario.script is not None:
        fault = _scripted(world, actor, op, site, key)
    else:
        choices = FAULTS[op]
        pick = world.sched.decide(f"fault:{actor.kind}:{op}", len(choices) + 1)
        fault = choices[pick - 1] if pick else None
        if fault is None and actor.kind in world.crashable and world.sched.decide(f"crash:{actor.kind}", 2):
            fault = "crash"
    world.coverage.request(
        actor.kind,
        actor.phase,
        op,
        fault,
        hot=site is not None and world.hot_key(key),
        crossing=world.crosses(actor, site, key),
    )
    if fault is not None:
        world.sched.note(f"{fault}: {op} {site + ':' if site else ''}{key} ({actor.phase})")
    if fault == "crash":
        world.crashed(actor)
        raise Killed
    return fault


def _scripted(world, actor, op: str, site: str | None, key: str) -> str | None:
    for i, rule in enumerate(world.scenario.script):
        hits = world.script_hits.get(i, 0)
        if (not rule.times or hits < rule.times) and rule.matches(actor, op, site, key, world.sched.now):
            if rule.fault not in FAULTS.get(op, ()) and rule.fault != "crash":
                continue
            world.script_hits[i] = hits + 1
            return rule.fault
    return None


class FaultyStore:
    """A `MemoryStore` as every actor reaches it: see the module docstring. `role` is the
    site whose store it is ("primary" or "secondary")."""

    def __init__(self, world, inner: MemoryStore, role: str):
        self.world, self.inner, self.role = world, inner, role
        self.uri, self.capabilities = inner.uri, inner.capabilities

    def _request(self, op: str, key: str) -> str | None:
        world = self.world
        actor = world.sched.current
        if actor is None:  # the simulator itself (set-up, checks): no faults, no turn
            return None
        world.sched.point(f"{self.role}.{op} {key}")
        if not world.reachable(actor, self.role):
            world.coverage.request(actor.kind, actor.phase, op, "partition", crossing=True)
            world.sched.sleep(DEADLINE_S)
            raise ProviderUnavailable(f"{self.uri}: connect timeout (partitioned, simulated)")
        if world.throttled(self.role, key):  # a hot key: 503 SlowDown for everyone, a while
            world.coverage.request(actor.kind, actor.phase, op, "throttled", hot=True)
            world.sched.advance(LATENCY_S)
            raise ProviderUnavailable(f"{self.uri}/{key}: 503 SlowDown (throttled, simulated)")
        fault = _fault(world, op, self.role, key)
        world.sched.advance(LATENCY_S)
        if fault == "error":
            raise ProviderUnavailable(f"{self.uri}/{key}: 503 SlowDown (simulated)")
        if fault == "timeout":
            world.sched.sleep(DEADLINE_S)
            raise ProviderUnavailable(f"{self.uri}/{key}: read timeout (simulated)")
        if fault == "latency":
            world.sched.sleep(SLOW_S[world.sched.decide("slow", len(SLOW_S))])
        if fault == "full":  # what a full file:// store raises (LocalStore.put)
            raise ProviderUnavailable(f"{self.uri}/{key}: cannot write: No space left on device (simulated)")
        return fault

    def _lost(self, key: str) -> None:
        self.world.sched.sleep(DEADLINE_S)
        raise ProviderUnavailable(f"{self.uri}/{key}: the reply was lost (simulated; the write landed)")

    def list(self, prefix: str = "") -> Iterator:
        fault = self._request("list", prefix or "/")
        items = list(self.inner.list(prefix))
        if fault == "partial":
            yield from items[: len(items) // 2]
            raise ProviderUnavailable(f"{self.uri}: listing {prefix!r} reset mid-way (simulated)")
        yield from items

    def head(self, key: str):
        self._request("head", key)
        return self.inner.head(key)

    def _shard(self, key: str) -> None:
        """A big shard takes a while to move between regions (a replicator's copy; a job
        writes its own region's store fast): other actors run meanwhile."""
        actor = self.world.sched.current
        if self.world.shard_s and "/shard-" in key and actor is not None and actor.kind == "replicator":
            self.world.sched.sleep(self.world.shard_s)

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        fault = self._request("read", key)
        self._shard(key)
        data = b"".join(self.inner.read(key, start, end))
        if fault == "partial":
            yield data[: len(data) // 2]
            raise ProviderUnavailable(f"{self.uri}/{key}: connection reset mid-read (simulated)")
        yield data

    def put(
        self,
        key: str,
        data: bytes | Iterable[bytes],
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
        crc32c: int | None = None,
        size: int | None = None,
    ):
        body = bytes(data) if isinstance(data, bytes | bytearray | memoryview) else b"".join(data)
        fault = self._request("put", key)
        self._shard(key)
        old = self.inner.peek(key)
        info = self.inner.put(
            key, body, if_none_match=if_none_match, if_match=if_match, crc32c=crc32c, size=size
        )
        self.world.landed(self.role, key, old, body)
        if fault == "lost-reply":
            self._lost(key)
        return info

    def delete(self, key: str) -> None:
        fault = self._request("delete", key)
        old = self.inner.peek(key)
        self.inner.delete(key)
        if old is not None:
            self.world.landed(self.role, key, old, None)
        if fault == "lost-reply":
            self._lost(key)

    def server_copy(self, source, src_key: str, dst_key: str, **cond):
        return None  # another provider's store: the caller streams (every byte a request)


class ComputeView:
    """The compute API (a `SimCompute`) as every actor reaches it: each call a yield point,
    a cluster in a partitioned region unreachable from outside it."""

    def __init__(self, world, inner):
        self.world, self.inner = world, inner

    def _request(self, op: str, cluster: str | None, infra: str | None = None, acts: bool = False):
        world = self.world
        actor = world.sched.current
        if actor is None:
            return None
        world.sched.point(f"compute.{op} {cluster or ''}")
        infra = infra or (self.inner.infra_of(cluster) if cluster else None)
        if infra is not None and not world.reaches_infra(actor, infra):
            world.coverage.request(
                actor.kind, actor.phase, "compute-act" if acts else "compute", "partition", crossing=True
            )
            world.sched.sleep(DEADLINE_S)
            raise ProviderUnavailable(f"{infra}: API unreachable (partitioned, simulated)")
        fault = _fault(world, "compute-act" if acts else "compute", None, f"{op} {cluster or ''}")
        world.sched.advance(LATENCY_S)
        if fault == "error":
            raise ProviderUnavailable(f"compute {op} {cluster or ''}: 503 (simulated)")
        if fault == "latency":
            world.sched.sleep(SLOW_S[world.sched.decide("slow", len(SLOW_S))])
        return fault

    def _lost(self, op: str) -> None:
        self.world.sched.sleep(DEADLINE_S)
        raise ProviderUnavailable(f"compute {op}: the reply was lost (simulated; it happened)")

    def plan(self, candidates, blocked=()):
        self._request("plan", None)
        return self.inner.plan(candidates, blocked)

    def launch(self, cluster, option, job=None):
        fault = self._request("launch", cluster, option.infra, acts=True)
        status = self.inner.launch(cluster, option, job)
        self.world.oracle.acted(f"launched {cluster}")
        if fault == "lost-reply":
            self._lost("launch")
        return status

    def run(self, cluster, job):
        fault = self._request("run", cluster, acts=True)
        status = self.inner.run(cluster, job)
        self.world.oracle.acted(f"ran a job on {cluster}")
        if fault == "lost-reply":
            self._lost("run")
        return status

    def status(self, cluster):
        self._request("status", cluster)
        return self.inner.status(cluster)

    def logs(self, cluster):
        self._request("logs", cluster)
        return self.inner.logs(cluster)

    def teardown(self, cluster):
        fault = self._request("teardown", cluster, acts=True)
        self.inner.teardown(cluster)
        self.world.oracle.acted(f"tore down {cluster}")
        if fault == "lost-reply":
            self._lost("teardown")

    def clusters(self):
        return self.inner.clusters()


class LedgerSink:
    """A machine's local ledger file (`LedgerFile`) whose appends are yield points, and
    which a full disk refuses (`WriteFailed`, as the real file does)."""

    def __init__(self, world, inner):
        self.world, self.inner = world, inner
        self.path = inner.path

    def append(self, entry) -> None:
        world = self.world
        if world.sched.current is not None:
            world.sched.point("ledger.append")
            where = (
                self.path.relative_to(world.folder) if self.path.is_relative_to(world.folder) else self.path
            )
            if _fault(world, "ledger", None, str(where)) == "full":
                world.unwritten[entry.run_id] = True  # its entry as it stands is not the run's last
                raise WriteFailed(
                    f"cannot write the RTO ledger {self.path}: No space left on device (simulated)"
                )
        self.inner.append(entry)
        world.unwritten.pop(entry.run_id, None)

    def read(self, runbook=None):
        return self.inner.read(runbook)

    def entry(self, runbook, run_id):
        """The run's last entry, read back by its re-run (a local file: no fault)."""
        return self.inner.entry(runbook, run_id)
