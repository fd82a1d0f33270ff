"""The user's SkyPilot task YAML, read with its lines and adapted for the secondary: where it
runs is the candidate's business, and what it names of the primary's checkpoint store points
at the secondary's.

Pure functions over the YAML mapping (no SkyPilot import): the compute provider builds the
`sky.Task` from their output, the renderer writes the hand-run task from it, and validate
(`lifeboat_dr.providers.compute.skycheck`) adds SkyPilot's own schema verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lifeboat_dr.runbooks.problems import Problem, RunbookInvalid
from lifeboat_dr.runbooks.yaml_source import Loc, parse, read_text

# The keys that say where a task runs; a failover candidate replaces all of them.
LOCATION_KEYS = ("infra", "cloud", "region", "zone")
STORE_SCHEMES = ("s3://", "gs://")
STORE_MOUNT = "/lifeboat/checkpoints"  # where the secondary store's bucket is mounted
CHECKPOINT_DIR_ENV = "LIFEBOAT_CHECKPOINT_DIR"  # where its checkpoint prefix then lies


def read_task(path: Path, shown: str) -> tuple[dict, dict[Loc, int]]:
    """The task YAML as a mapping plus the line of every key, read within the runbook's own
    bounds (`lifeboat_dr.runbooks.yaml_source`); `RunbookInvalid` (one problem, naming `shown`)
    when it is missing, not a regular file, too large, not UTF-8, not YAML, or not a mapping."""
    data, lines = parse(read_text(Path(path), shown), shown)
    if not isinstance(data, dict):
        raise RunbookInvalid([Problem(shown, 1, "", "a SkyPilot task YAML is a mapping")])
    return data, lines


def strip_location(config: dict) -> dict:
    """`config` without `infra/cloud/region/zone` in `resources` (and in its `any_of` /
    `ordered` entries): the candidate decides where, whatever the task pins."""
    res = config.get("resources")
    if not isinstance(res, dict):
        return config
    res = {k: v for k, v in res.items() if k not in LOCATION_KEYS}
    for key in ("any_of", "ordered"):
        if isinstance(res.get(key), list):
            res[key] = [
                {k: v for k, v in r.items() if k not in LOCATION_KEYS} if isinstance(r, dict) else r
                for r in res[key]
            ]
    return {**config, "resources": res}


def mount_secondary(config: dict, store_uri: str | None, *, files: bool = True) -> dict:
    """`config` with the secondary store's bucket mounted at `STORE_MOUNT` (SkyPilot mounts
    whole buckets only: a sub-path in MOUNT mode is its StorageModeError) and
    `LIFEBOAT_CHECKPOINT_DIR` naming the prefix under it. `files=False`: the env only
    (`sky exec` skips file mounts)."""
    if not store_uri or not store_uri.startswith(STORE_SCHEMES):
        return config
    scheme, _, rest = store_uri.partition("://")
    bucket, _, prefix = rest.partition("/")
    config = dict(config)
    config["envs"] = {
        **(config.get("envs") or {}),
        CHECKPOINT_DIR_ENV: f"{STORE_MOUNT}/{prefix.strip('/')}".rstrip("/"),
    }
    if files:
        config["file_mounts"] = {
            **(config.get("file_mounts") or {}),
            STORE_MOUNT: {"source": f"{scheme}://{bucket}", "mode": "MOUNT"},
        }
    return config


def pinned_location(config: Mapping) -> str | None:
    """What the task pins (`aws/us-east-1`), for the note that the candidate overrides it."""
    res = config.get("resources")
    if not isinstance(res, dict):
        return None
    if res.get("infra"):
        return str(res["infra"])
    parts = [str(res[k]) for k in ("cloud", "region", "zone") if res.get(k)]
    return "/".join(parts) or None


def _bucket_root(uri: str) -> str:
    scheme, _, rest = uri.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def map_store_uri(uri: str, primary: str, secondary: str) -> str | None:
    """`uri` moved from the primary store onto the secondary, None when it does not name the
    primary's bucket. Raises ValueError when it names the primary bucket in a way that has
    no counterpart on the secondary (outside the store prefix, prefixes differing)."""
    p, s = primary.rstrip("/"), secondary.rstrip("/")
    if uri.rstrip("/") == p or uri.startswith(p + "/"):
        return s + uri.rstrip("/")[len(p) :] if uri.rstrip("/") == p else s + uri[len(p) :]
    pb, sb = _bucket_root(p), _bucket_root(s)
    if uri.rstrip("/") != pb and not uri.startswith(pb + "/"):
        return None
    if p[len(pb) :] == s[len(sb) :]:  # same layout under both buckets: map bucket to bucket
        return sb + uri[len(pb) :]
    raise ValueError(
        f"{uri} names the primary bucket outside the checkpoint store {primary}, and the "
        f"secondary store {secondary} has another prefix: point it at {primary} or below"
    )


def rewrite_store_refs(
    config: dict, primary: str | None, secondary: str | None, *, shown: str, lines: dict[Loc, int]
) -> tuple[dict, list[str], list[Problem]]:
    """Point the task's file mounts and env values that name the primary store at the
    secondary. Returns the new config, one line per rewrite, and the problems (with the
    task's line) for references that cannot be moved. `run`/`setup` text naming the primary
    bucket is a problem too: shell text is not rewritten behind the user's back."""
    if not primary or not secondary or not primary.startswith(STORE_SCHEMES):
        return config, [], []
    config = dict(config)
    done: list[str] = []
    problems: list[Problem] = []

    def move(value: str, loc: Loc) -> str:
        try:
            new = map_store_uri(value, primary, secondary)
        except ValueError as e:
            problems.append(Problem(shown, line_of(lines, loc), ".".join(map(str, loc)), str(e)))
            return value
        if new is None:
            return value
        done.append(f"{'.'.join(map(str, loc))}: {value} -> {new}")
        return new

    mounts = config.get("file_mounts")
    if isinstance(mounts, dict):
        out = {}
        for dst, spec in mounts.items():
            loc: Loc = ("file_mounts", dst)
            if isinstance(spec, str):
                out[dst] = move(spec, loc)
            elif isinstance(spec, dict) and isinstance(spec.get("source"), str):
                out[dst] = {**spec, "source": move(spec["source"], (*loc, "source"))}
            elif isinstance(spec, dict) and isinstance(spec.get("source"), list):
                src = [
                    move(v, (*loc, "source", i)) if isinstance(v, str) else v
                    for i, v in enumerate(spec["source"])
                ]
                out[dst] = {**spec, "source": src}
            else:
                out[dst] = spec
        config["file_mounts"] = out
    envs = config.get("envs")
    if isinstance(envs, dict):
        config["envs"] = {
            k: move(v, ("envs", k)) if isinstance(v, str) and "://" in v else v for k, v in envs.items()
        }
    bucket = _bucket_root(primary.rstrip("/"))
    for key in ("setup", "run"):
        text = config.get(key)
        if isinstance(text, str) and bucket in text:
            problems.append(
                Problem(
                    shown,
                    line_of(lines, (key,)),
                    key,
                    f"names the primary store's bucket {bucket}, which is down in a failover; "
                    "pass it through an env var or a file mount that Lifeboat can repoint",
                )
            )
    return config, done, problems


def line_of(lines: dict[Loc, int], loc: Loc) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def config_for(task_yaml: Path) -> dict:
    """The task YAML as a plain mapping, for building a `sky.Task` (`RunbookInvalid`, a
    ConfigError, on failure: as `read_task`, each problem under `job.task`)."""
    try:
        return read_task(task_yaml, str(task_yaml))[0]
    except RunbookInvalid as e:
        raise RunbookInvalid([as_task_problem(p) for p in e.problems]) from None


def as_task_problem(p: Problem) -> Problem:
    """A problem found in the task file, as the runbook's `job.task` field's."""
    return Problem(p.file, p.line, "job.task", f"{p.field}: {p.message}" if p.field else p.message)
