"""`lifeboat validate`'s checks of what the runbook hands to SkyPilot, before any incident.

`load_runbook_and_task(path)` loads the runbook (`lifeboat_dr.runbooks.loader`), then, for a SkyPilot
secondary, reads `job.task` with its lines and reports, as `task-file:line: job.task: ...`:
- SkyPilot's own verdict on the task (its JSON schema and `sky.Task.from_yaml_config`), e.g.
  `resources.acelerators: Instead of 'acelerators', did you mean 'accelerators'?`;
- file mounts / envs / run text that name the primary's store in a way the failover cannot
  move to the secondary (`skytask.rewrite_store_refs`).
A pinned location (`resources.infra: aws/us-east-1`) is fine: candidates replace it.

SkyPilot's verdict costs an `import sky`; it is remembered by the task file's content
(`memo`), so re-validating an unchanged task stays fast.
"""

from __future__ import annotations

import os
from pathlib import Path

from lifeboat_dr.runbooks.loader import Loc, Problem, RunbookInvalid, load_runbook
from lifeboat_dr.runbooks.skytask import (
    as_task_problem,
    line_of,
    read_task,
    rewrite_store_refs,
    strip_location,
)


def load_runbook_and_task(path: str | Path, *, catalog: str | None = None):
    """The loaded runbook; `RunbookInvalid` listing every problem, the task's included.
    `catalog` (live/snapshot; default the runbook's `plan.catalog`) is the SkyPilot setup
    the caller will plan with: SkyPilot fixes its catalog paths at import."""
    rb = load_runbook(path)
    if rb.secondary.infra == "local" or not rb.job.task:
        return rb
    problems = task_problems(
        rb.resolve(rb.job.task),
        primary_store=rb.store_uri(rb.primary.store),
        secondary_store=rb.store_uri(rb.secondary.store),
        catalog=catalog or rb.plan.catalog,
    )
    if problems:
        raise RunbookInvalid(problems)
    return rb


def _shown(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def task_problems(
    task_path: Path, *, primary_store: str, secondary_store: str, catalog: str | None = None
) -> list[Problem]:
    """What is wrong with a SkyPilot task (`job.task`), each as `file:line: job.task: ...`:
    SkyPilot's verdict over the `catalog` setting (live/snapshot/None), and references to
    `primary_store` that cannot move to `secondary_store`."""
    shown = _shown(task_path)
    try:
        config, lines = read_task(task_path, shown)
    except RunbookInvalid as e:
        return [as_task_problem(p) for p in e.problems]
    from lifeboat_dr.providers.compute.memo import fingerprint, remembered

    verdict, _ = remembered(
        "task-schema",
        fingerprint(files=[task_path], shown=shown),
        lambda: [_to_json(p) for p in _schema(catalog, config, shown, lines)],
    )
    problems = [as_task_problem(Problem(**p)) for p in verdict]
    _, _, moved = rewrite_store_refs(config, primary_store, secondary_store, shown=shown, lines=lines)
    return problems + [as_task_problem(p) for p in moved]


def _schema(catalog, config, shown, lines) -> list[Problem]:
    from lifeboat_dr.providers.compute.skycatalog import choose_catalog
    from lifeboat_dr.providers.compute.skyplan import use_offline_catalog

    if "sky" not in __import__("sys").modules and choose_catalog(catalog).kind == "snapshot":
        use_offline_catalog()
    return schema_problems(config, shown=shown, lines=lines)


def _to_json(p: Problem) -> dict:
    return {"file": p.file, "line": p.line, "field": p.field, "message": p.message}


def schema_problems(config: dict, *, shown: str, lines: dict[Loc, int]) -> list[Problem]:
    """SkyPilot's own verdict on the task: its JSON schema (the message is SkyPilot's, the
    line is the offending key's), then `sky.Task.from_yaml_config` for the rules the schema
    cannot say (a bad accelerator name, conflicting fields)."""
    from lifeboat_dr.providers.compute.skyplan import import_sky

    sky = import_sky()
    from sky.utils import common_utils, schemas
    from sky.utils import validator as sky_validator

    clean = {k: v for k, v in config.items() if v is not None}
    checks: list[tuple[Loc, object, dict]] = [((), clean, schemas.get_task_schema())]
    res = clean.get("resources")
    if isinstance(res, dict):  # the task schema leaves `resources` to the resources schema
        checks.append((("resources",), res, schemas.get_resources_schema()))
    for base, obj, schema in checks:
        errors = list(sky_validator.get_schema_validator()(schema).iter_errors(obj))
        if not errors:
            continue
        first = min(errors, key=lambda e: len(e.absolute_path))
        loc = (*base, *first.absolute_path)
        if first.validator == "additionalProperties" and isinstance(first.instance, dict):
            known = set((first.schema or {}).get("properties", {}))
            loc = (*loc, next((k for k in first.instance if k not in known), ""))
        try:
            common_utils.validate_schema(obj, schema, "")
            message = first.message
        except ValueError as e:
            message = str(e).strip().splitlines()[0]
        return [Problem(shown, line_of(lines, loc), ".".join(map(str, loc)), message)]
    try:
        sky.Task.from_yaml_config(strip_location(config))
    except (ValueError, TypeError, KeyError) as e:
        text = str(e).strip().splitlines()
        return [
            Problem(shown, line_of(lines, ("resources",)) or 1, "", f"SkyPilot: {text[0] if text else e}")
        ]
    return []
