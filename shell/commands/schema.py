"""`lifeboat schema`: the runbook's JSON Schema, for editors that validate YAML."""

from __future__ import annotations

import json

from lifeboat_dr.runbooks.model import Runbook
from lifeboat_dr.shell.cli import COMMANDS


def register(subparsers) -> None:
    p = subparsers.add_parser("schema", help=COMMANDS["schema"])
    p.set_defaults(handler=run)


def run(args) -> int:
    schema = Runbook.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Lifeboat runbook"
    print(json.dumps(schema, indent=2))
    return 0
