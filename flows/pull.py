"""The pull step every deployed run takes (`lifeboat deploy --repository`): the project at the
deployed commit, in the run's own folder — and still there when the git server is not.

Prefect's own `git_clone` clones from the server on every run, so a git server in the failed
region (or one that is merely down during the incident) turns every failover into a crashed
run. Here each worker host keeps a mirror of the repository (`$LIFEBOAT_GIT_CACHE`, default
`~/.cache/lifeboat/git`), refreshed on every run the server answers (the watch runs every
few seconds: the mirror is warm long before an outage); when it does not answer, the run
checks the pinned commit out of the mirror and says so. A commit neither has is one line
naming the repository and the commit, never a guess at another commit.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lifeboat_dr.kernel.errors import ProviderUnavailable

FETCH_TIMEOUT_S = 60  # a git server that has not answered by then is treated as down


def clone_pinned(repository: str, commit_sha: str, *, into: Path | None = None) -> dict[str, str]:
    """Check `repository` out at `commit_sha` into a new folder under `into` (the working
    directory: Prefect runs each flow run's steps in a fresh one); returns `{"directory":
    folder}`, relative, which Prefect then runs the flow in. Raises
    ProviderUnavailable when neither the server nor this host's mirror has the commit."""
    mirror = _mirror_of(repository)
    with _locked(mirror):
        refreshed = _refresh(mirror, repository)
        if not _has(mirror, commit_sha):
            why = (
                "the server does not have it"
                if refreshed is None
                else f"the server did not answer ({refreshed})"
            )
            raise ProviderUnavailable(
                f"cannot check out {repository} at {commit_sha}: {why}, and this host's copy "
                f"({mirror}) does not have it"
            )
        if refreshed is not None:
            _warn(
                f"git server {repository} did not answer ({refreshed}): running {commit_sha} from this host's copy"
            )
        folder = (into or Path.cwd()) / f"lifeboat-{commit_sha[:12]}"
        # a plain local clone (hard links), not --shared: a gc of the mirror cannot break it
        _git("clone", "--quiet", "--no-checkout", str(mirror), str(folder))
    _git("-C", str(folder), "checkout", "--quiet", "--detach", commit_sha)
    differ = code_differences(folder)
    if differ:
        _warn(
            f"this worker's installed Lifeboat is not the code of {commit_sha}: {len(differ)} file(s) "
            f"differ (first: {differ[0]}); the run goes on with the installed code — install "
            f"{commit_sha} on this worker host"
        )
    return {"directory": folder.name}


def code_differences(checkout: Path) -> list[str]:
    """The product files (`<layer>/**/*.py`, as setup.py maps them into `lifeboat_dr`) that
    differ between `checkout` and the installed package this process imports: the flows run
    the installed code, the checkout supplies the runbooks. Not refused (a worker not yet
    upgraded must still be able to fail over), said in the run's log."""
    import importlib

    differ = []
    for layer in sorted(p.parent.name for p in checkout.glob("*/__init__.py")):
        try:
            installed = Path(importlib.import_module(f"lifeboat_dr.{layer}").__path__[0])
        except ImportError:
            continue  # not a layer of the package (tests/, benchmarks/)
        ours = {f.relative_to(installed): f for f in installed.rglob("*.py")}
        theirs = {f.relative_to(checkout / layer): f for f in (checkout / layer).rglob("*.py")}
        for rel in sorted(ours.keys() | theirs.keys()):
            a, b = ours.get(rel), theirs.get(rel)
            if a is None or b is None or a.read_bytes() != b.read_bytes():
                differ.append(f"{layer}/{rel}")
    return differ


def _warn(message: str) -> None:
    """To the run's own log in the Prefect UI (a pull step runs before the flow, outside any run
    context: the run is named by the id the worker gave its process) and the worker's console."""
    from prefect.logging import get_logger

    run_id = os.environ.get("PREFECT__FLOW_RUN_ID")
    if run_id:
        get_logger("prefect.flow_runs").warning(message, extra={"flow_run_id": run_id})
    else:
        get_logger("lifeboat.pull").warning(message)


def _mirror_of(repository: str) -> Path:
    root = Path(os.environ.get("LIFEBOAT_GIT_CACHE") or Path.home() / ".cache" / "lifeboat" / "git")
    root.mkdir(parents=True, exist_ok=True)
    return root / f"{hashlib.sha256(repository.encode()).hexdigest()[:16]}.git"


@contextmanager
def _locked(mirror: Path) -> Iterator[None]:
    """One run at a time per mirror on this host (two fetches into one repository race)."""
    with open(mirror.with_suffix(".lock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def _refresh(mirror: Path, repository: str) -> str | None:
    """Bring the mirror up to the server's refs; None when it did, else why not."""
    if mirror.exists():
        args = ("-C", str(mirror), "fetch", "--quiet", "--prune", repository, "+refs/*:refs/*")
    else:
        args = ("clone", "--quiet", "--mirror", repository, str(mirror))
    try:
        _git(*args, timeout=FETCH_TIMEOUT_S)
    except ProviderUnavailable as e:
        return str(e)
    return None


def _has(mirror: Path, commit_sha: str) -> bool:
    if not mirror.exists():
        return False
    done = subprocess.run(
        ["git", "-C", str(mirror), "cat-file", "-e", f"{commit_sha}^{{commit}}"], capture_output=True
    )
    return done.returncode == 0


def _git(*args: str, timeout: float = FETCH_TIMEOUT_S) -> None:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}  # a worker has no one to type a password
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ProviderUnavailable(
            f"git {args[0] if args[0] != '-C' else args[2]}: no answer in {timeout:.0f}s"
        ) from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise ProviderUnavailable(f"git: {lines[-1] if lines else f'exit {done.returncode}'}")
