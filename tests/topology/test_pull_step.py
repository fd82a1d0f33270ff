"""The pull step of every deployed run (flows/pull.py) against real git: the project at the
pinned commit in the run's own folder, from the server when it answers and from the worker
host's mirror when it does not (a git server in the failed region must not crash the failover
that region's outage started). The server is a bare repository on disk (`file://`); "down" is
that repository moved away."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from lifeboat_dr.flows.pull import clone_pinned
from lifeboat_dr.kernel.errors import ProviderUnavailable


def _git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def server(tmp_path, monkeypatch):
    """(bare repository URL, its folder, commit 1, commit 2): runbooks/x.yaml at "v1" then "v2"."""
    monkeypatch.setenv("LIFEBOAT_GIT_CACHE", str(tmp_path / "mirrors"))
    work = tmp_path / "work"
    (work / "runbooks").mkdir(parents=True)
    _git("init", "-q", "-b", "main", cwd=work)
    commits = []
    for text in ("v1", "v2"):
        (work / "runbooks" / "x.yaml").write_text(text)
        _git("add", ".", cwd=work)
        _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", text, cwd=work)
        commits.append(_git("rev-parse", "HEAD", cwd=work))
    bare = tmp_path / "server.git"
    _git("clone", "-q", "--bare", str(work), str(bare))
    return f"file://{bare}", bare, *commits


def _run_in(folder: Path, repository: str, commit: str) -> Path:
    folder.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        return folder / clone_pinned(repository, commit)["directory"]


def test_a_run_gets_the_pinned_commit_not_the_newest(server, tmp_path):
    url, _, first, _ = server
    checkout = _run_in(tmp_path / "run1", url, first)
    assert (checkout / "runbooks" / "x.yaml").read_text() == "v1"
    assert _git("rev-parse", "HEAD", cwd=checkout) == first


def test_with_the_git_server_down_a_run_checks_out_the_mirror_and_says_so(server, tmp_path, caplog):
    url, bare, first, second = server
    _run_in(tmp_path / "watch", url, second)  # an earlier run on this host warmed the mirror
    bare.rename(tmp_path / "gone.git")  # the git server goes away with the region
    checkout = _run_in(tmp_path / "failover", url, first)
    assert (checkout / "runbooks" / "x.yaml").read_text() == "v1"
    assert "did not answer" in caplog.text and first in caplog.text


def test_a_cold_host_with_the_server_down_fails_in_one_line_naming_repository_and_commit(server, tmp_path):
    url, bare, first, _ = server
    bare.rename(tmp_path / "gone.git")
    with pytest.raises(ProviderUnavailable) as e:
        _run_in(tmp_path / "run", url, first)
    assert url in str(e.value) and first in str(e.value) and "did not answer" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_commit_the_server_never_had_is_refused_not_replaced_by_another(server, tmp_path):
    url, _, _, _ = server
    unknown = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(ProviderUnavailable, match="the server does not have it"):
        _run_in(tmp_path / "run", url, unknown)


def test_two_runs_on_one_host_at_once_both_get_their_commit(server, tmp_path):
    """Two flow runs on one worker host start together (the mirror is fetched by one at a time)."""
    url, _, first, second = server
    got, errors = {}, []

    def run(name: str, commit: str) -> None:
        folder = tmp_path / name
        folder.mkdir()
        try:
            got[commit] = folder / clone_pinned(url, commit, into=folder)["directory"]
        except Exception as e:  # noqa: BLE001 - the assertion below names it
            errors.append(e)

    threads = [threading.Thread(target=run, args=(f"r{i}", c)) for i, c in enumerate((first, second, first))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {c: _git("rev-parse", "HEAD", cwd=path) for c, path in got.items()} == {
        first: first,
        second: second,
    }


def test_a_worker_whose_installed_code_is_not_the_commits_says_so_and_runs(tmp_path, monkeypatch, caplog):
    """The flows run the worker's installed package; the checkout supplies the runbooks. A
    worker not yet upgraded still fails over, and the run's log names what differs."""
    import shutil

    import lifeboat_dr.kernel as kernel

    monkeypatch.setenv("LIFEBOAT_GIT_CACHE", str(tmp_path / "mirrors"))
    work = tmp_path / "work"
    shutil.copytree(Path(kernel.__path__[0]), work / "kernel", ignore=shutil.ignore_patterns("__pycache__"))
    _git("init", "-q", "-b", "main", cwd=work)
    commits = []
    for edit in (False, True):
        if edit:
            errors = work / "kernel" / "errors.py"
            errors.write_text(errors.read_text() + "\n# a later commit\n")
        _git("add", ".", cwd=work)
        _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "kernel", cwd=work)
        commits.append(_git("rev-parse", "HEAD", cwd=work))
    same, later = commits
    url = f"file://{work}"
    _run_in(tmp_path / "same", url, same)
    assert "is not the code of" not in caplog.text
    checkout = _run_in(tmp_path / "later", url, later)
    assert (checkout / "kernel" / "errors.py").read_text().endswith("# a later commit\n")
    assert f"is not the code of {later}: 1 file(s) differ (first: kernel/errors.py)" in caplog.text
