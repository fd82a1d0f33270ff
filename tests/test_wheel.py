"""The built wheel, installed in a fresh venv outside the checkout, is the whole product: from
a folder with no checkout in sight, `lifeboat --help`, a dry-run failover of a shipped example
found by name, and `lifeboat deploy` against a Prefect server all run, and the deployments'
runbooks are ones a worker finds (a shipped example by name, the user's file by its path).

The fresh venv borrows the project's installed dependencies through a `.pth` line naming
their site-packages (installing prefect, skypilot and the rest again takes minutes); a path
added that way has its own `.pth` files ignored, so the editable install's finder stays off
and `lifeboat_dr` can only come from the wheel, which the test asserts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_BUILT_FROM = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", ".lifeboat", "__pycache__", "*.egg-info", "tests", "benchmarks"
)
POOL, SECONDARY_POOL = "wheel-lifeboat", "wheel-lifeboat-secondary"


def build_wheel(out: Path) -> Path:
    """`pip wheel` of a clean copy of the checkout (a stale build/ folder would ship its files)."""
    src = out / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=NOT_BUILT_FROM)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out / "dist")],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (out / "dist").glob("lifeboat_dr-*.whl")
    return wheel


def fresh_venv(folder: Path, wheel: Path) -> Path:
    """A venv with the wheel installed and the project's dependencies borrowed; its bin/."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "lifeboat-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    return folder / "bin"


def installed_package(bindir: Path, cwd: Path) -> Path:
    """Where `import lifeboat_dr` finds the package, run from `cwd`."""
    code = "import lifeboat_dr; print(lifeboat_dr.__file__)"
    return Path(run(bindir, cwd, "python", "-c", code).stdout.strip()).parent


def package_files(package: Path) -> set[str]:
    """Every file of the installed package, bytecode aside."""
    return {str(p.relative_to(package)) for p in package.rglob("*") if "__pycache__" not in p.parts}


def run(bindir: Path, cwd: Path, *argv: str, env: dict[str, str] | None = None, timeout: float = 120):
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environ["PATH"] = f"{bindir}{os.pathsep}{environ['PATH']}"  # `python` in a local job is the venv's
    done = subprocess.run(
        [str(bindir / argv[0]), *argv[1:]],
        cwd=cwd, env={**environ, **(env or {})}, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture
def clean_server():
    """The shared server as the test found it: its deployments, pools and automations removed."""
    from prefect.client.orchestration import get_client

    from lifeboat_dr.providers.orchestrator.prefect_api import CRASH_AUTOMATION, RERUN_AUTOMATION

    yield
    with get_client(sync_client=True) as client:
        for a in client.read_automations():
            if a.name in ("failover-on-confirmed-outage", CRASH_AUTOMATION, RERUN_AUTOMATION):
                client.delete_automation(a.id)
        for d in client.read_deployments():
            if d.work_pool_name in (POOL, SECONDARY_POOL):
                client.delete_deployment(d.id)
        for pool in (POOL, SECONDARY_POOL):
            client.delete_work_pool(pool)


@pytest.mark.integration
def test_the_installed_wheel_fails_over_a_shipped_example_and_deploys_without_a_checkout(
    prefect_server, clean_server, tmp_path
):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    started = time.monotonic()
    bindir = fresh_venv(tmp_path / "venv", build_wheel(tmp_path / "build"))
    here = tmp_path / "oncall"  # outside the checkout, nothing in it
    here.mkdir()
    package = installed_package(bindir, here)
    assert package.is_relative_to(tmp_path / "venv"), package  # the wheel's code, not the checkout's
    shipped = package_files(package)
    assert {"flows/prefect.yaml", "runbooks/demo.yaml", "runbooks/jobs/llama-70b.sky.yaml",
            "providers/compute/catalog/v8/SNAPSHOT", "providers/compute/catalog/v8/aws/vms.csv"} <= shipped  # fmt: skip
    assert not [f for f in shipped if f.endswith(".dr.sky.yaml")]  # generated tasks stay out
    assert "flows/drills/partition/drill.py" in shipped  # `lifeboat drill --kind partition` needs no checkout

    assert "deploy" in run(bindir, here, "lifeboat", "--help").stdout
    env = {"PREFECT_API_URL": PREFECT_API_URL.value()}
    dry = run(bindir, here, "lifeboat", "failover", "llama-70b-pretrain", "--dry-run", env=env).stdout
    assert "outcome: completed" in dry
    assert (here / ".lifeboat" / "ledger.jsonl").exists()  # written here, not in the package

    user = tmp_path / "team" / "my-job.yaml"  # the user's own runbook, outside this folder
    user.parent.mkdir()
    user.write_text((ROOT / "runbooks" / "demo.yaml").read_text().replace("name: demo", "name: my-job"))
    deploy = run(bindir, here, "lifeboat", "deploy", "demo", str(user), "--pool", POOL,
                 "--secondary-pool", SECONDARY_POOL, env=env).stdout  # fmt: skip
    assert "deployment watch/demo" in deploy and "deployment watch/my-job" in deploy
    with get_client(sync_client=True) as client:
        written = {
            name: client.read_deployment_by_name(f"watch/{name}").parameters["runbook"]
            for name in ("demo", "my-job")
        }
    assert written == {"demo": "demo", "my-job": str(user)}
    # what a worker in this folder reads for each: the shipped demo, the user's file
    checked = run(bindir, here, "lifeboat", "validate", *written.values()).stdout
    assert "demo: ok (demo," in checked and f"{user}: ok (my-job," in checked

    assert package_files(package) == shipped  # nothing written into the installed package
    print(f"wheel built, installed and run: {time.monotonic() - started:.1f}s")
