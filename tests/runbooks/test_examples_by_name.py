"""The shipped examples by name: `lifeboat failover llama-70b-pretrain --dry-run` works from any
folder, a real file of that name always wins, and a name that is neither says what there is."""

from pathlib import Path

from lifeboat_dr.flows.deploy import runbook_target
from lifeboat_dr.runbooks.examples import examples
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.shell.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_every_runbook_in_the_package_is_an_example_named_after_itself():
    shipped = examples()
    assert sorted(shipped) == sorted(p.stem for p in (ROOT / "runbooks").glob("*.yaml"))
    assert {load_runbook(path).name for path in shipped.values()} == set(shipped)


def test_an_example_is_found_by_name_from_a_folder_without_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "llama-70b-pretrain"]) == 0
    assert capsys.readouterr().out.startswith("llama-70b-pretrain: ok (llama-70b-pretrain, pretraining,")
    assert load_runbook("demo").path == (ROOT / "runbooks" / "demo.yaml").resolve()


def test_a_real_file_of_that_name_wins(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").write_text("name: mine\n")
    assert main(["validate", "demo"]) == 1
    assert capsys.readouterr().err.startswith("demo:1: workload: required, but missing")


def test_a_folder_of_that_name_does_not_hide_the_example(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # the checkout has a demo/ folder (the demo's code)
    assert main(["validate", "demo"]) == 0
    assert capsys.readouterr().out.startswith("demo: ok (demo, finetuning,")


def test_an_unknown_name_is_one_line_listing_the_examples(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "llama-70b"]) == 1
    assert capsys.readouterr().err == (
        "llama-70b: no such file, nor a shipped example runbook (batch-embed, chat-serving, demo, "
        "demo-serving, demo-torch, llama-70b-pretrain, mistral-7b-sft)\n"
    )


def test_deploy_writes_an_example_given_by_name_as_its_name_and_a_file_as_its_path(tmp_path):
    # each worker finds the name in its own installed package, wherever its venv lives
    assert runbook_target("demo", ROOT).path == "demo"
    assert runbook_target("runbooks/demo.yaml", ROOT).path == "runbooks/demo.yaml"
    assert runbook_target(ROOT / "runbooks/demo.yaml", tmp_path).path == str(ROOT / "runbooks/demo.yaml")


def test_the_shipped_prefect_yaml_is_the_root_one_not_a_second_copy():
    assert (ROOT / "flows" / "prefect.yaml").resolve() == (ROOT / "prefect.yaml").resolve()
