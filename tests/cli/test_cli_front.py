"""The CLI's front: `--version`, a near miss answered with "did you mean", `--json` on every
command that prints a result (the command table itself is the list), a directory or a FIFO
given to `validate` refused in one line, and a failback that says how it can be approved."""

import argparse
import json
import os
from datetime import timedelta

import pytest

from lifeboat_dr.core.ledger import LedgerFile, RtoLedger
from lifeboat_dr.shell.cli import COMMANDS, build_parser, main

# Commands that print no result of their own to put in JSON, and why.
NO_JSON = {
    "serve": "a web server: it prints only its address",
    "render": "prints the runbook as a Markdown document (its data is the YAML)",
    "schema": "prints a JSON Schema: JSON already",
}


def subcommand(name: str):
    parser = build_parser([name])
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices[name]


def flags(parser) -> set[str]:
    found = set(parser._option_string_actions)
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):  # `manifest write`: the result is the sub-action's
            for sub in a.choices.values():
                found |= flags(sub)
    return found


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_that_prints_a_result_takes_json(name):
    if name in NO_JSON:
        assert "--json" not in flags(subcommand(name)), f"{name} takes --json now: drop it from NO_JSON"
    else:
        assert "--json" in flags(subcommand(name)), f"lifeboat {name} prints a result but has no --json"


@pytest.mark.parametrize("argv", [["--help"], *([name, "--help"] for name in COMMANDS)], ids=lambda a: a[0])
def test_every_help_renders(argv, capsys):
    """argparse %-formats help strings: a bare "50% of" broke `lifeboat --help` itself."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0 and "usage: lifeboat" in capsys.readouterr().out


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == "lifeboat 0.1.0\n"


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["failovr", "demo"], "did you mean 'failover'?"),
        (["certify", "demo", "--jsno"], "did you mean --json?"),
        (["drill", "demo", "--kind", "proces-kill"], "did you mean 'process-kill'?"),
        (["failback", "demo", "--aproval", "approve"], "did you mean --approval?"),
    ],
)
def test_a_near_miss_is_answered_with_did_you_mean(argv, hint, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert done.value.code == 2 and err.endswith(hint), err


def _ledger_with_a_failback(path):
    ledger = RtoLedger(
        "demo", "run-back", rto_target=timedelta(minutes=2), rpo_target=timedelta(seconds=30),
        kind="failback", sink=LedgerFile(path),
    )  # fmt: skip
    ledger.mark("outage_start")
    ledger.mark("first_step")
    ledger.finish("completed")


def test_json_output_parses(tmp_path, capsys, monkeypatch):
    """Each command with --json, run here on what it needs: stdout is one JSON document."""
    monkeypatch.chdir(tmp_path)
    ckpt = tmp_path / "step-00000040"
    ckpt.mkdir()
    (ckpt / "shard-0.bin").write_bytes(b"weights")
    _ledger_with_a_failback(tmp_path / "ledger.jsonl")
    runs = {
        "validate": ["validate", "demo", "--json"],
        "keys": ["keys", "generate", str(tmp_path / "signing.pem"), "--json"],
        "manifest": ["manifest", "write", str(ckpt), "--json"],
        "report": ["report", "demo", "--ledger", str(tmp_path / "ledger.jsonl"), "--json"],
        "plan": ["plan", "llama-70b-pretrain", "--json"],
        "advise": ["advise", "llama-70b-pretrain", "--json"],
    }
    for name, argv in runs.items():
        code = main(argv)
        out = capsys.readouterr().out
        try:
            doc = json.loads(out)
        except ValueError:
            pytest.fail(f"lifeboat {' '.join(argv)} printed no JSON document:\n{out[:2000]}")
        assert code == 0, (name, doc)
    assert [e["kind"] for e in json.loads(_run(capsys, runs["report"]))["entries"]] == ["failback"]


def _run(capsys, argv) -> str:
    main(argv)
    return capsys.readouterr().out


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_validate_refuses_a_directory_or_a_fifo_in_one_line(tmp_path, capsys, kind):
    path = tmp_path / "runbook.yaml"
    path.mkdir() if kind == "directory" else os.mkfifo(path)
    assert main(["validate", str(path)]) == 1  # at once: a FIFO with no writer is never read
    assert capsys.readouterr().err.splitlines() == [f"{path}: not a regular file"]


def test_a_failback_that_will_wait_says_where_to_decide_and_that_nothing_here_can_verify(capsys, monkeypatch):
    from lifeboat_dr.runbooks.loader import load_runbook
    from lifeboat_dr.shell.approval_hint import approval_hint

    monkeypatch.delenv("LIFEBOAT_APPROVAL_PUBLIC_KEYS", raising=False)
    monkeypatch.delenv("LIFEBOAT_APPROVAL_PUBLIC_KEYS_FILE", raising=False)
    rb = load_runbook("demo")
    where, nobody = approval_hint(rb, "failback", None)
    assert "after 10m its policy decides (on_timeout: abort)" in where
    assert "Prefect UI" in where and "`lifeboat approve RUN_ID --reason …`" in where
    assert "no person's decision can be verified" in nobody
    assert nobody.endswith(f"`lifeboat failback {rb.path} --approval approve` decides at once (every site "
                           "of this runbook is on this machine).")  # fmt: skip
    assert approval_hint(rb, "failback", "approve") == []
