"""`make demo`: kill a real (tiny) training job, detect it, fail it over, prove the same loss.

Everything is the embedded default of `runbooks/demo.yaml`: a local Prefect server on SQLite,
`file://` stores for both sites, local compute. The trainer runs on the "primary", replication
copies its checkpoints to the "secondary", a random step kills it (SIGKILL: a lost node), the
real probes and quorum confirm the outage, and the real failover flow resumes the job on the
secondary. Exit 0 only when RTO and RPO meet their targets and the resumed losses equal an
uninterrupted run's. With `--failback` (`make demo DEMO_ARGS=--failback`) the primary then
comes back and the job, still training on the secondary, fails back to it (the `failback`
flow); the demo prints both ledger entries (kind failover, kind failback) and checks the
losses after the failback too.

`--trainer torch` plays the same with `runbooks/demo-torch.yaml`: a tiny PyTorch model under
torchrun (2 CPU ranks, gloo) saving torch.distributed.checkpoint checkpoints (the `torch` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from lifeboat_dr.demo.home import ROOT, enter

RUNBOOKS = {"numpy": "runbooks/demo.yaml", "torch": "runbooks/demo-torch.yaml"}
DEMO = Path(".lifeboat/demo")
STEPS, EVERY, STEP_SECONDS = 60, 5, 0.4


def main(argv: list[str] | None = None) -> int:
    if "--serving" in (sys.argv[1:] if argv is None else argv):  # the realtime-serving demo
        from lifeboat_dr.demo.serving import main as serving_demo

        return serving_demo(argv)
    if "--fleet" in (sys.argv[1:] if argv is None else argv):  # the fleet arbitration demo
        from lifeboat_dr.demo.fleet import main as fleet_demo

        return fleet_demo(argv)
    p = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    p.add_argument("--approve-in-ui", action="store_true", help="pause for your approval in the Prefect UI")
    p.add_argument(
        "--port", type=int, default=int(os.environ.get("LIFEBOAT_DEMO_PORT", 0)), help="Prefect UI port"
    )
    p.add_argument("--seed", type=int, default=None, help="seed for the kill step (default: random, printed)")
    p.add_argument(
        "--trainer",
        choices=sorted(RUNBOOKS),
        default="numpy",
        help="the job: the numpy trainer (manifest checkpoints) or a PyTorch one under torchrun (DCP)",
    )
    p.add_argument("--failback", action="store_true", help="then bring the primary back and fail back to it")
    args = p.parse_args(argv)
    from lifeboat_dr.standins.trainer.jobs import trainer_job

    if args.failback and args.trainer != "numpy":
        print("make demo: --failback plays with the numpy trainer only (drop --trainer)", file=sys.stderr)
        return 2
    job = trainer_job(args.trainer)
    if why := job.missing():
        print(f"make demo: {why}", file=sys.stderr)
        return 2
    enter()
    for leftover in (DEMO, Path("runbooks/.lifeboat/clusters")):
        shutil.rmtree(leftover, ignore_errors=True)
    DEMO.mkdir(parents=True)
    os.environ["LIFEBOAT_STATE_DIR"] = str(DEMO / "detect")  # a fresh detection episode
    proxy = None
    if args.approve_in_ui:  # a UI decision counts only with a verified login: put the proxy in front
        from lifeboat_dr.demo.proxy import DemoProxy

        proxy = DemoProxy()
    with (
        uninterrupted_run(job, job_steps(RUNBOOKS[job.name])) as reference,
        prefect_server(args.port or free_port(), proxy.server_env() if proxy else {}) as url,
    ):
        from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

        updates = {PREFECT_API_URL: f"{url}/api"} | (
            {PREFECT_API_AUTH_STRING: proxy.server_auth} if proxy else {}
        )
        with (
            temporary_settings(updates=updates),
            proxy.running(url, DEMO) if proxy else contextlib.nullcontext(),
        ):
            if proxy:
                os.environ["LIFEBOAT_APPROVAL_PUBLIC_KEYS"] = proxy.public_key  # the flow verifies with it
            try:
                return play(url, job, reference, proxy=proxy, seed=args.seed, failback=args.failback)
            finally:  # deliver the last logs and events before the server goes away
                from prefect.events.worker import EventsWorker
                from prefect.logging.handlers import APILogWorker

                APILogWorker.drain_all()
                EventsWorker.drain_all()


def play(
    url: str, job, reference: subprocess.Popen, *, proxy=None, seed: int | None, failback: bool = False
) -> int:
    from lifeboat_dr.core.ledger import LedgerFile
    from lifeboat_dr.flows.failover import failover, outcome_of
    from lifeboat_dr.runbooks.loader import load_runbook

    runbook = RUNBOOKS[job.name]
    rb = load_runbook(runbook)
    seed = seed if seed is not None else random.SystemRandom().randrange(10_000)
    kill_step = random.Random(seed).randint(15, 45)
    say(f"Prefect UI: {proxy.url if proxy else url}  (runs appear there as they happen)")
    say(
        f"1. training on the primary ({JOBS[job.name]}): {STEPS} steps, a checkpoint every {EVERY}; "
        "replication to the secondary"
    )
    trainer = start_trainer(job)
    replication = Replicator(rb)
    replication.start()
    try:
        wait_for_step(DEMO / "primary-loss.jsonl", kill_step, trainer)
        os.killpg(trainer.pid, signal.SIGKILL)
        outage_at = datetime.now(UTC)
        say(f"2. SIGKILL at step {kill_step} (seed {seed}): the primary is gone at {outage_at:%H:%M:%S}")
    finally:
        replication.stop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(trainer.pid, signal.SIGKILL)
        trainer.wait()

    say("3. detection: the watch flow polls the runbook's signals until the quorum confirms")
    decision = detect(runbook, timeout_s=60)
    evidence = [f"{r['signal']}: {r['summary']}" for r in decision["evidence"]]
    for line in evidence:
        say(f"   {line}")
    say(f"   {decision['summary']}")

    if proxy:
        from lifeboat_dr.demo.proxy import LOGIN

        say(
            f"4. failover: approve it in the UI — {proxy.url}/runs, sign in with {LOGIN}:{proxy.password}, "
            "the paused run → Resume, switch Approve on, give a reason, Submit"
        )
    else:
        say("4. failover (auto-approved at the console; --approve-in-ui to do it yourself)")
    result = outcome_of(
        failover(
            runbook,
            outage_started_at=outage_at,
            detected_at=datetime.fromisoformat(decision["at"]),
            evidence=evidence,
            approval="wait" if proxy else "approve",
            return_state=True,
        )
    )
    (entry,) = [e for e in LedgerFile().read(rb.name) if e.run_id == result["run_id"]]
    try:
        if failback:  # the job trains on: the failback stops it at a checkpoint boundary
            same, detail = losses_match(reference, logged_losses(rb, cluster_of(rb)), result["checkpoint"])
        else:
            wait_job_done(cluster_of(rb))
            same, detail = losses_match(
                reference, logged_losses(rb, cluster_of(rb)), result["checkpoint"], whole=True
            )
    finally:
        if not failback:
            teardown(cluster_of(rb))

    say("5. the failover's record (ledger entry, kind failover)")
    ok = show(rb, entry, result, detail) and same
    if failback:
        ok = play_failback(rb, reference) and ok
    say("demo passed" if ok else "demo FAILED")
    return 0 if ok else 1


def play_failback(rb, reference: subprocess.Popen) -> bool:
    """The primary is back: fail the job back to it, check its losses, show the record."""
    from lifeboat_dr.core.ledger import LedgerFile
    from lifeboat_dr.flows.failback import failback
    from lifeboat_dr.flows.failover import outcome_of
    from lifeboat_dr.flows.wiring import failback_cluster

    say(
        "6. the primary is back: failback — reverse replication, certify on the primary, approval, "
        "fence (the secondary's job stops at its next checkpoint), hand back its last commits, "
        "resume on the primary, loss parity against the secondary job's log"
    )
    home = failback_cluster(rb)
    try:
        try:
            result = outcome_of(failback(RUNBOOKS["numpy"], approval="approve", return_state=True))
        except Exception as e:  # the flow's own log has the story; the demo says it in one line
            say(f"   failback FAILED: {type(e).__name__}: {e}")
            return False
        (entry,) = [e for e in LedgerFile().read(rb.name) if e.run_id == result["run_id"]]
        same, detail = False, f"failback {result['outcome']}"
        if result["outcome"] == "completed":
            wait_job_done(home)
            same, detail = losses_match(reference, logged_losses(rb, home), result["checkpoint"], whole=True)
    finally:
        teardown(home)
        teardown(cluster_of(rb))  # stopped by the failback already; in any case
    say("7. the failback's record (ledger entry, kind failback)")
    return show(rb, entry, result, detail) and same


def show(rb, entry, result: dict, detail: str) -> bool:
    """Print a ledger entry's phases and verdict; whether it completed within its targets."""
    from lifeboat_dr.core.timeline import phase_rows
    from lifeboat_dr.kernel.durations import format_duration

    say("   " + entry.model_dump_json(include={"kind", "run_id", "outcome", "checkpoint", "notes"}))
    for row in phase_rows(entry):
        say("   " + "  ".join(f"{v:<20}" for v in row.values()))
    if entry.start_up:  # no step's: the run created, its runbook loaded and wired
        say(
            f"   flow start-up {format_duration(entry.start_up[1] - entry.start_up[0])} (detection to the confirm step)"
        )
    rto_ok = entry.rto is not None and entry.rto <= rb.rto_target
    rpo_ok = entry.rpo is not None and entry.rpo <= rb.rpo_target
    for name, value, target, ok in (
        ("RTO", entry.rto, rb.rto_target, rto_ok),
        ("RPO", entry.rpo, rb.rpo_target, rpo_ok),
    ):
        say(
            f"   {entry.kind}: {name} {format_duration(value)} (target {format_duration(target)}): "
            f"{'met' if ok else 'MISSED'}"
        )
    say(
        f"   timeline picture: {ROOT / result['timeline']}"
        if result["timeline"]
        else "   no timeline picture"
    )
    if entry.parity is not None:  # passed, mismatch or not provable: how the resume was proved
        say(f"   loss parity: {entry.parity.line()}")
    say(f"   loss check: {detail}")
    return result["outcome"] == "completed" and rto_ok and rpo_ok


def say(text: str) -> None:
    print(f"[lifeboat demo] {text}", flush=True)


JOBS = {"numpy": "numpy trainer, Lifeboat manifests", "torch": "PyTorch, 2 ranks under torchrun, DCP"}


def start_trainer(job) -> subprocess.Popen:
    return job.start(
        log=DEMO / "primary.log",
        steps=STEPS,
        every=EVERY,
        ckpt_dir=DEMO / "primary",
        loss_log=DEMO / "primary-loss.jsonl",
        heartbeat=DEMO / "primary-heartbeat.json",
        step_seconds=STEP_SECONDS,
    )


def job_steps(runbook: str) -> int:
    """The step the runbook's job trains to (its `--steps`): the reference runs as far."""
    from lifeboat_dr.runbooks.loader import load_runbook

    argv = shlex.split(load_runbook(runbook).job.command)
    return int(argv[argv.index("--steps") + 1])


@contextlib.contextmanager
def uninterrupted_run(job, steps: int):
    """The same job run start to end (to `steps`), meanwhile, in a folder of its own: the
    loss check's reference (`reference-loss.jsonl`). Stopped on the way out if still running."""
    proc = job.start(
        log=DEMO / "reference.log",
        steps=steps,
        every=EVERY,
        ckpt_dir=DEMO / "reference",
        loss_log=DEMO / "reference-loss.jsonl",
        heartbeat=DEMO / "reference-heartbeat.json",
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_for_step(loss_log: Path, step: int, trainer: subprocess.Popen) -> None:
    from lifeboat_dr.core.resume import parse_losses

    while not any(s >= step for s in parse_losses(loss_log.read_text() if loss_log.exists() else "")):
        if trainer.poll() is not None:
            raise SystemExit(
                f"the demo trainer exited early (code {trainer.returncode}); see {DEMO / 'primary.log'}"
            )
        time.sleep(0.05)


class Replicator:
    """What the scheduled `replicate` deployment does, every second: copy new checkpoints."""

    def __init__(self, rb):
        from lifeboat_dr.flows.wiring import open_sites

        self.rb, (self.primary, self.secondary) = rb, open_sites(rb)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="replicate", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        from lifeboat_dr.core.checkpoints.inventory import committed_checkpoints
        from lifeboat_dr.core.replication.copying import replicate_checkpoints

        while not self._stop.wait(1.0):
            sources = committed_checkpoints(self.primary, self.rb.checkpoint.layout.value)
            replicate_checkpoints(self.primary, self.secondary, sources[:2], rpo_target=self.rb.rpo_target)


def detect(runbook: str, timeout_s: float) -> dict:
    from lifeboat_dr.flows.watch import watch

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        decision = watch(runbook)
        if decision["state"] == "confirmed":
            return decision
        time.sleep(0.5)
    raise SystemExit(f"detection did not confirm the outage within {timeout_s:g}s")


def cluster_of(rb) -> str:
    from lifeboat_dr.flows.wiring import cluster_name

    return cluster_name(rb)


def wait_job_done(cluster: str, timeout_s: float = 60) -> None:
    from lifeboat_dr.providers.compute.base import JobState
    from lifeboat_dr.providers.compute.local import LocalCompute

    compute = LocalCompute(ROOT / "runbooks/.lifeboat/clusters")
    deadline = time.monotonic() + timeout_s
    while (
        compute.status(cluster).job not in (JobState.SUCCEEDED, JobState.FAILED)
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)


def logged_losses(rb, cluster: str) -> str:
    """A resumed job's log: its cluster's (the job on the primary after a failback), else the
    loss log beside the secondary's checkpoints (the torch job logs per rank)."""
    from lifeboat_dr.providers.compute.local import LocalCompute

    if cluster == cluster_of(rb) and (DEMO / "secondary-loss.jsonl").exists():
        return (DEMO / "secondary-loss.jsonl").read_text()
    return LocalCompute(ROOT / "runbooks/.lifeboat/clusters").logs(cluster)


def losses_match(reference: subprocess.Popen, log: str, checkpoint: str, *, whole: bool = False):
    """A resumed run's losses (from its log) against the uninterrupted run of the same job:
    every step it logged after the checkpoint, and with `whole` every step to the end."""
    from lifeboat_dr.core.resume import parse_losses

    try:
        code = reference.wait(timeout=60)
    except subprocess.TimeoutExpired:
        code = None
    if code != 0:
        return False, f"the uninterrupted run did not finish (exit {code}); see {DEMO / 'reference.log'}"
    resumed_from = int(checkpoint.rstrip("/").rsplit("-", 1)[1])
    resumed = {s: v for s, v in parse_losses(log).items() if s > resumed_from}
    reference_losses = parse_losses((DEMO / "reference-loss.jsonl").read_text())
    expected = {s: v for s, v in reference_losses.items() if s > resumed_from and (whole or s in resumed)}
    if not expected or resumed != expected:
        diff = sorted(s for s in expected.keys() | resumed.keys() if resumed.get(s) != expected.get(s))[:5]
        return False, f"resumed losses differ from the uninterrupted run at steps {diff or 'none logged'}"
    return (
        True,
        f"steps {min(expected)}–{max(expected)}: {len(expected)} losses identical to an uninterrupted run",
    )


def teardown(cluster: str) -> None:
    from lifeboat_dr.providers.compute.local import LocalCompute

    LocalCompute(ROOT / "runbooks/.lifeboat/clusters").teardown(cluster)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def prefect_server(port: int, extra_env: dict[str, str]):
    """`prefect server start` on SQLite under .lifeboat/prefect; stopped on the way out."""
    home = ROOT / ".lifeboat" / "prefect"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        # the UI calls this API from the browser: on a random port, :4200 would be wrong
        "PREFECT_UI_API_URL": f"http://127.0.0.1:{port}/api",
        **extra_env,
    }
    log = open(DEMO / "prefect-server.log", "wb")  # noqa: SIM115 - lives as long as the server
    server = subprocess.Popen(  # `-m prefect`: this interpreter's, console script or not
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        say(f"starting a local Prefect server on {url} (SQLite in {home.relative_to(ROOT)})")
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/api/health", timeout=2) as r:
                if r.status == 200:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the Prefect server did not start; see {DEMO / 'prefect-server.log'}")
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
