"""What `lifeboat deploy RUNBOOK…` asks Prefect to create, from `prefect.yaml` as a template.

`prefect.yaml` lists Lifeboat's deployments once. An entry whose `runbook` parameter is the
placeholder `RUNBOOK_PLACEHOLDER` is per runbook (watch, certify, replicate, prestage, the
drills, audit, recover): `deployment_plan` makes one copy for each runbook given, named after it, with
the runbook written in as the workers will find it, and its name where a trigger matches the
runbook's own events (`NAME_PLACEHOLDER`: `recover`, only for a runbook with a `recovery:`
ladder, started by the training faults that name it) (`runbook_target`): a file by its path,
relative to the project root when it lives inside it (so every run reads the same file in its
clone of the deployed commit, `GitSource`, or in the project folder itself) and absolute otherwise; a shipped example given by
name (`lifeboat deploy demo`) by that name, which each worker finds in its own installed
package (`lifeboat_dr.runbooks.examples`).
Prefect fills `{{ $VAR }}` at deploy time, on the deploying host, which is why the path is
written in here and never left to an environment variable. Every other entry (`failover`,
started by the automation with the runbook from the outage event; `failback` and
`fleet-failover`, started by hand) is deployed once; a parameter of one that is
`RUNBOOKS_PLACEHOLDER` gets the list of every runbook deployed (`capacity`'s `runbooks`, over
the whole fleet); one that is `FLEET_PLACEHOLDER` the deployed runbooks that group, as
`FleetMember`s (`failover`'s `fleet`: whom a confirmed outage may group with). Runbooks
of one failed primary region that group (`fleet.group_window`) must name one lock store.

Two work pools: every entry runs on `pool` (`lifeboat`: workers at the secondary site or a
third one, the control plane) except those the template puts on `lifeboat-secondary`, which
run on `secondary_pool`: the second `watch` of each runbook, `vantage: secondary`, on a
worker at the secondary site. The two watches share the signal state (`LIFEBOAT_STATE_DIR`)
and are folded by vantage (`lifeboat_dr.core.detection.vantage`): a primary that only one of them
cannot reach gives no vote.

Each runbook's `watch`, `replicate` and `certify` run at the periods its targets need
(`lifeboat_dr.core.cadences`: RPO and RTO, checkpoint cadence, detection lag, recovery time),
the template's intervals as the longest, or at the runbook's own `cadences`; `loss_log` a
few times per checkpoint interval, and only for a runbook whose loss log is in the primary
store (for any other it has nothing to ship and is not deployed).

The template is the repository root's `prefect.yaml`, shipped in the package as
`lifeboat_dr/flows/prefect.yaml` (in the checkout a link to the root's) and read through
`importlib.resources` (`shipped_template`), so an installed wheel deploys without a checkout.
The plan is a plain `prefect.yaml` document; the shell writes it out and runs
`prefect deploy --all` on it, so Prefect's own loader checks it the way an operator's would.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lifeboat_dr.core.cadences import FLOWS, CadenceInputs, CadencePlan, plan_cadences
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.runbooks.examples import example_named

if TYPE_CHECKING:
    from lifeboat_dr.flows.grouping import FleetMember
    from lifeboat_dr.runbooks.model import Runbook

RUNBOOK_PLACEHOLDER = "{{ lifeboat.runbook }}"
RUNBOOKS_PLACEHOLDER = "{{ lifeboat.runbooks }}"  # every runbook deployed, for the fleet's flows
FLEET_PLACEHOLDER = "{{ lifeboat.fleet }}"  # every deployed runbook that groups (`FleetMember`s)
NAME_PLACEHOLDER = "{{ lifeboat.runbook.name }}"  # in a per-runbook entry's triggers: the runbook's name
WORK_POOL = "lifeboat"
SECONDARY_POOL = "lifeboat-secondary"  # the template's name for workers at the secondary site
HEARTBEAT_S = 30  # failover runs beat this often; two missed beats mark one Crashed
TEMPLATE = "prefect.yaml"  # in this package: the repository root's, linked in


def shipped_template() -> dict[str, Any]:
    """Lifeboat's own `prefect.yaml`, as shipped with the installed package."""
    import yaml

    return yaml.safe_load(resources.files(__package__).joinpath(TEMPLATE).read_text())


@dataclass(frozen=True)
class GitSource:
    """Where every flow run gets the project: `repository` (any URL git clones: https, ssh,
        file) checked out at `commit` in the run's own folder, by the pull step `flows/pull.py` (Prefect's
    `git_clone`, kept working from each worker host's mirror when the git server is down)."""

    repository: str
    commit: str


def pull_steps(project_root: Path, source: GitSource | None) -> list[dict[str, Any]]:
    """The plan's `pull` section: clone `source` pinned to its commit (Prefect then runs the
    flow in the clone, so runbook paths relative to the project resolve there), or, with no
    source, run in `project_root` itself, which then must exist on every worker's host."""
    if source is None:
        return [
            {"prefect.deployments.steps.set_working_directory": {"directory": str(project_root.resolve())}}
        ]
    clone = {"repository": source.repository, "commit_sha": source.commit}
    return [{"lifeboat_dr.flows.pull.clone_pinned": clone}]  # git_clone, with a mirror for when git is down


@dataclass(frozen=True)
class RunbookTarget:
    """One runbook to deploy: its name, the path the worker will read, and the figures its
    flows' periods come from (None: the template's periods)."""

    name: str
    path: str
    cadence_inputs: CadenceInputs | None = None
    ladder: bool = False  # the runbook has a `recovery:` section: it gets a `recover` deployment
    member: FleetMember | None = None  # what a failover of its region groups by; None: it never groups


def runbook_target(given: str | Path, project_root: Path) -> RunbookTarget:
    """Load the runbook (a bad one is refused here, not every minute on a worker) and say how
    the workers will find it: a shipped example given by name as that name, a file by its
    path relative to `project_root` when it lies inside it, else absolute."""
    from lifeboat_dr.flows.grouping import FleetMember
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(given)
    inputs, ladder = cadence_inputs(rb), "recovery" in rb.model_fields_set
    if example_named(given):
        return RunbookTarget(rb.name, str(given), inputs, ladder, FleetMember.of(rb, str(given)))
    full = rb.path
    try:
        shown = str(full.relative_to(project_root.resolve()))
    except ValueError:
        shown = str(full)
    return RunbookTarget(rb.name, shown, inputs, ladder, FleetMember.of(rb, shown))


def fleet_groups(targets: list[RunbookTarget]) -> list[str]:
    """One line per failed region whose runbooks group: who, and in which lock store; a
    region with one grouping runbook is said to fail over alone (its window goes unused)."""
    by_region: dict[str, list[FleetMember]] = {}
    for m in (t.member for t in targets if t.member is not None):
        by_region.setdefault(m.region, []).append(m)
    lines = []
    for region, members in sorted(by_region.items()):
        names = ", ".join(sorted(m.name for m in members))
        if len(members) == 1:
            lines.append(f"fleet {region}: {names} alone groups there, so it fails over alone")
        else:
            lines.append(f"fleet {region}: {names} group their outages in {members[0].lock_store}")
    return lines


def one_lock_store_per_region(targets: list[RunbookTarget]) -> None:
    """Refuse runbooks of one failed region that group in different lock stores: their
    outages would form two fleet runs that each plan the whole secondary."""
    first: dict[str, FleetMember] = {}
    for m in (t.member for t in targets if t.member is not None):
        seen = first.setdefault(m.region, m)
        if seen.lock_store != m.lock_store:
            raise ConfigError(
                f"lifeboat deploy: {seen.name} and {m.name} both fail over from {m.region} but group in "
                f"different lock stores ({seen.lock_store}, {m.lock_store}): give their fleet.lock_store one URI"
            )


def cadence_inputs(rb: Runbook) -> CadenceInputs:
    """The figures `lifeboat_dr.core.cadences` reads, from the runbook (see its docstring)."""
    from lifeboat_dr.flows.wiring import loss_log_key

    d, ck = rb.detection, rb.checkpoint
    lag_of = {
        "training_progress": d.stall_after,
        "checkpoint_freshness": ck.cadence * ck.freshness_factor,
    }
    if rb.serving is not None:
        s = rb.serving
        holds = s.switch.hold * (len(s.switch.steps) - 1)
        after, after_field = s.canary.latency_budget + holds, "serving.canary.latency_budget"
    else:
        after, after_field = rb.failover.expected_ready, "failover.expected_ready"
    cluster = rb.cluster
    return CadenceInputs(
        rpo=rb.rpo_target,
        rto=rb.rto_target,
        rpo_applies=rb.serving is None,
        checkpoint_every=ck.cadence,
        checkpoint_write=cluster.checkpoint_write if cluster else timedelta(0),
        copy=cluster.replication if cluster else timedelta(0),
        lags={s.value: lag_of.get(s.value, timedelta(0)) for s in d.signals},
        quorum=d.quorum,
        window=d.window,
        after=after,
        after_field=after_field,
        overrides={f: getattr(rb.cadences, f) for f in FLOWS},
        loss_log=loss_log_key(rb) is not None,
    )


def deployed_period(rb: Runbook, flow: str) -> tuple[timedelta, str]:
    """The period `lifeboat deploy` schedules `flow` at for `rb` (shipped template), and why:
    `runbook's cadences.<flow>`, `derived from the targets` or `the template's`."""
    c = plan_cadences(cadence_inputs(rb), template_periods(shipped_template())).cadences[flow]
    why = {"runbook": f"runbook's cadences.{flow}", "derived": "derived from the targets"}
    return c.period, why.get(c.source, "the template's")


def _flow_of(entry: dict[str, Any]) -> str:
    return entry["entrypoint"].rsplit(":", 1)[1]


def _interval(entry: dict[str, Any]) -> float | None:
    """The entry's one interval schedule, in seconds (None: cron, several, or none)."""
    schedules = entry.get("schedules") or []
    if len(schedules) == 1 and isinstance(schedules[0], dict) and "interval" in schedules[0]:
        return float(schedules[0]["interval"])
    return None


def template_periods(template: dict[str, Any]) -> dict[str, timedelta]:
    """watch, replicate, certify, loss_log -> the template's interval for it: the longest a
    derived one is."""
    periods = {}
    for entry in template.get("deployments") or []:
        if isinstance(entry, dict) and "entrypoint" in entry and is_per_runbook(entry):
            seconds = _interval(entry)
            if _flow_of(entry) in FLOWS and seconds is not None:
                periods.setdefault(_flow_of(entry), timedelta(seconds=seconds))
    missing = [f for f in FLOWS if f not in periods]
    if missing:
        raise ConfigError(
            f"prefect.yaml: no per-runbook {missing[0]!r} deployment with one interval schedule"
        )
    return periods


def cadence_plan(template: dict[str, Any], target: RunbookTarget) -> CadencePlan | None:
    """The periods `deployment_plan` gives `target`'s watch, replicate and certify, and the
    targets they cannot meet (None: a target given without its figures keeps the template's)."""
    if target.cadence_inputs is None:
        return None
    return plan_cadences(target.cadence_inputs, template_periods(template))


def is_per_runbook(entry: dict[str, Any]) -> bool:
    return entry.get("parameters", {}).get("runbook") == RUNBOOK_PLACEHOLDER


def per_runbook_name(entry: dict[str, Any], runbook: str) -> str:
    """`watch` → `watch/<runbook>`; `drill-az` → `drill/drill-az-<runbook>`."""
    flow = _flow_of(entry)
    return runbook if entry["name"] == flow else f"{entry['name']}-{runbook}"


def for_runbook(entry: dict[str, Any], target: RunbookTarget) -> dict[str, Any]:
    """A per-runbook `entry` for `target`: named after it, its path as the `runbook` parameter,
    its name where the entry's trigger matches the runbook's events (`recover`)."""
    one = copy.deepcopy(entry)
    one["name"] = per_runbook_name(entry, target.name)
    one["parameters"]["runbook"] = target.path
    for trigger in one.get("triggers") or []:
        match = trigger.get("match") or {}
        trigger["match"] = {k: target.name if v == NAME_PLACEHOLDER else v for k, v in match.items()}
    return one


def deployment_plan(
    template: dict[str, Any],
    targets: list[RunbookTarget],
    project_root: Path,
    *,
    pool: str = WORK_POOL,
    secondary_pool: str = SECONDARY_POOL,
    heartbeat_s: int = HEARTBEAT_S,
    source: GitSource | None = None,
) -> dict[str, Any]:
    """The `prefect.yaml` document that deploys `template`'s shared entries once and its
    per-runbook entries once per target, run from `project_root`: on work pool `pool`, or
    `secondary_pool` for the entries the template puts on `lifeboat-secondary`; each target's
    watch, replicate and certify at the periods of its `cadence_plan`.
    `failover` runs send a heartbeat every `heartbeat_s` (the crash-recovery automation
    counts on it, whatever the worker's own settings). Each run gets the project from
    `source` (`pull_steps`)."""
    if not targets:
        raise ConfigError("lifeboat deploy: name at least one runbook")
    if secondary_pool == pool:
        raise ConfigError(
            f"lifeboat deploy: --secondary-pool {secondary_pool!r} must differ from --pool: the "
            "secondary's watch must run on a worker at the secondary site, not the control plane's"
        )
    names = [t.name for t in targets]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(
            f"lifeboat deploy: runbook name {twice[0]!r} given twice (runbook names must be unique)"
        )
    one_lock_store_per_region(targets)
    plans = {t.name: cadence_plan(template, t) for t in targets}
    out: list[dict[str, Any]] = []
    for entry in template.get("deployments") or []:
        if not isinstance(entry, dict) or "entrypoint" not in entry or "name" not in entry:
            raise ConfigError("prefect.yaml: every deployment needs a name and an entrypoint")
        copies = []
        if is_per_runbook(entry):
            for t in targets:
                plan = plans[t.name]
                if plan is not None and _flow_of(entry) in FLOWS and _flow_of(entry) not in plan.cadences:
                    continue  # no loss log in the primary store: nothing for `loss_log` to ship
                if _flow_of(entry) == "recover" and not t.ladder:
                    continue  # no ladder: a training fault is no outage, the watch decides those
                one = for_runbook(entry, t)
                if plan is not None and _flow_of(one) in FLOWS and _interval(one) is not None:
                    one["schedules"] = [{**one["schedules"][0], "interval": plan.seconds(_flow_of(one))}]
                copies.append(one)
        else:
            one = copy.deepcopy(entry)
            for name, value in (one.get("parameters") or {}).items():
                if value == RUNBOOKS_PLACEHOLDER:
                    one["parameters"][name] = [t.path for t in targets]
                elif value == FLEET_PLACEHOLDER:
                    one["parameters"][name] = [m.model_dump() for t in targets if (m := t.member) is not None]
            copies.append(one)
        for one in copies:
            at_secondary = (one.get("work_pool") or {}).get("name") == SECONDARY_POOL
            one["work_pool"] = {
                **(one.get("work_pool") or {}),
                "name": secondary_pool if at_secondary else pool,
            }
            if one["entrypoint"].endswith(":failover"):
                # a pool `lifeboat deploy` creates carries it in its locked template; this is for
                # a pool that lets deployments set env (deploy warns about those)
                job = one["work_pool"].setdefault("job_variables", {})
                job.setdefault("env", {})["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] = str(heartbeat_s)
            out.append(one)
    doc = {k: v for k, v in template.items() if k not in ("deployments", "pull", "build", "push")}
    doc["pull"] = pull_steps(project_root, source)
    doc["deployments"] = out
    return doc


FLOW_NAMES = {"fleet_failover": "fleet-failover"}  # the `@flow(name=…)` where it is not the function's


def deployment_names(plan: dict[str, Any]) -> list[str]:
    """`flow/deployment` of every entry in a plan, as Prefect names them."""
    return [f"{FLOW_NAMES.get(_flow_of(d), _flow_of(d))}/{d['name']}" for d in plan["deployments"]]


def pools_of(plan: dict[str, Any]) -> list[str]:
    """The work pools a plan's deployments run on, sorted."""
    return sorted({d["work_pool"]["name"] for d in plan["deployments"]})
