"""Promises about the project itself: light imports, deployable flows, the two commands."""

import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FLOW_MODULES = sorted(
    f"lifeboat_dr.flows.{p.stem}" for p in (ROOT / "flows").glob("*.py") if p.stem != "__init__"
)
HEAVY = ("boto3", "botocore", "google.cloud", "sky", "pynvml", "slack_sdk")


@pytest.mark.processes
def test_importing_flows_and_the_cli_needs_no_cloud_sdk_or_gpu_driver():
    code = (
        "import importlib, json, sys\n"
        f"for m in {FLOW_MODULES + ['lifeboat_dr.shell.cli', 'lifeboat_dr.shell.server']!r}: importlib.import_module(m)\n"
        "from lifeboat_dr.shell.cli import build_parser; build_parser(every=True)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith('google.cloud'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def _deployments():
    return yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]


@pytest.mark.parametrize("deployment", _deployments(), ids=lambda d: d["name"])
def test_every_deployment_points_at_a_flow_that_takes_its_parameters(deployment):
    module, _, name = deployment["entrypoint"].partition(":")
    flow = getattr(importlib.import_module(module), name)
    accepted = inspect.signature(flow.fn).parameters
    given = set(deployment.get("parameters", {}))
    for trigger in deployment.get("triggers", []):
        given |= set(trigger.get("parameters", {}))
    assert given <= set(accepted), f"{deployment['name']}: unknown parameters {given - set(accepted)}"
    required = {n for n, p in accepted.items() if p.default is inspect.Parameter.empty}
    assert required <= given or deployment.get("triggers") is None and not deployment.get("schedules"), (
        f"{deployment['name']}: scheduled or triggered without {required - given}"
    )
    assert "secret" not in json.dumps(deployment).lower() and "token" not in json.dumps(deployment).lower()


@pytest.mark.parametrize("deployment", _deployments(), ids=lambda d: d["name"])
def test_every_deployed_flow_form_describes_its_fields(deployment):
    module, _, name = deployment["entrypoint"].partition(":")
    flow = getattr(importlib.import_module(module), name)
    fields = flow.parameters.model_dump()["properties"]
    assert {n for n, f in fields.items() if not f.get("description")} == set()


def test_readme_shows_the_two_commands_and_ci_calls_make_test():
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
