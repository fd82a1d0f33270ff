"""The `drill` flow: rehearse one failure mode (or all) end to end and record the verdict.

`lifeboat_dr.flows.drills` injects the fault into a sandbox and checks the result; this module runs
the real failover (`lifeboat_dr.flows.failover.execute`, the same steps a real outage runs) over the
sandbox's providers, through the guard every acting flow goes through (a rehearsal: refused on
anything but a sandbox; the sandbox's own lock), keeps each step's result for the checks, and publishes every
`DrillResult` as a markdown artifact. A failing check fails the flow run. Scheduled in
prefect.yaml (GPU fault weekly, node monthly, AZ quarterly, region twice a year).
"""

from __future__ import annotations

from typing import Any, Literal

from prefect import flow

from lifeboat_dr.flows.drills import FLEET_KIND, DrillResult, Outcome, Rig, kinds_for, run_drill
from lifeboat_dr.kernel.errors import LifeboatError


class DrillFailed(LifeboatError):
    """At least one drill check failed; the message lists every check."""


class _Recorder:
    """The failover's steps, remembering what each returned (the drill's checks read them)."""

    def __init__(self, steps):
        self._steps, self.results = steps, {}

    def __getattr__(self, name: str):
        if name.startswith("_"):  # never proxy private or special names (copy, pickle)
            raise AttributeError(name)
        step = getattr(self._steps, name)

        def call(*args):
            value = step(*args)
            self.results[name] = value
            return value

        return call


def run_failover(rig: Rig) -> Outcome:
    """The failover of `rig.rb` with the drill's providers and parameters, inside this flow run."""
    from lifeboat_dr.flows.approval import ChatGate
    from lifeboat_dr.flows.failover import execute
    from lifeboat_dr.flows.guard import Guard
    from lifeboat_dr.flows.sandbox import sandbox_images
    from lifeboat_dr.flows.wiring import build_ledger, build_steps, providers_for, settings_for
    from lifeboat_dr.providers.chat.console import ConsoleChat
    from lifeboat_dr.providers.image_registry import FakeRegistry

    providers = providers_for(rig.rb, registry=FakeRegistry(sandbox_images(rig.rb)))
    if rig.primary is not None:
        providers.primary = rig.primary
    if rig.compute is not None:
        providers.compute = rig.compute
    steps = _Recorder(
        build_steps(
            rig.rb,
            run_id=rig.drill_id,
            drill=rig.drill_id,
            providers=providers,
            outage_started_at=rig.outage_started_at,
            detected_at=rig.detected_at,
            evidence=rig.evidence,
        )
    )
    ledger = build_ledger(rig.rb, run_id=rig.drill_id, drill=rig.kind)
    ledger.note("drill", rig.kind)
    guard = Guard(rig.rb, rig.drill_id, action="drill", approval=rig.approval, rehearsal=True)
    gate = ChatGate(rig.rb, ConsoleChat(guard.console), drill=True)  # never Slack: drills page nobody
    error = None
    try:
        with guard.acting(ledger, gate.notify, store=providers.secondary):
            execute(
                settings_for(rig.rb),
                steps,
                ledger,
                gate,
                run_id=rig.drill_id,
                drill=True,
                keep_cluster=rig.keep_cluster,
            )
    except Exception as e:  # the checks judge it
        error = e
    return Outcome(ledger.entry, steps.results, error)


def _publish(rb_name: str, result: DrillResult) -> None:
    from prefect.artifacts import create_markdown_artifact

    try:
        create_markdown_artifact(
            result.markdown(),
            key=f"drill-{rb_name}-{result.kind}",
            description=f"Drill {result.kind}: {'passed' if result.passed else 'FAILED'}",
        )
    except Exception as e:  # the record must not hide the verdict
        print(f"could not record the drill artifact: {e}")


def _fleet_drill(rb) -> DrillResult:
    """The `fleet` drill inside this flow run (flows/drills/fleet.py)."""
    import secrets

    from prefect.runtime import flow_run

    from lifeboat_dr.flows.drills.fleet import fleet_drill
    from lifeboat_dr.flows.sandbox import SANDBOX_ROOT

    return fleet_drill(rb, flow_run=flow_run, root=SANDBOX_ROOT, drill_id=f"fleet-{secrets.token_hex(4)}")


@flow(name="drill", log_prints=True)
def drill(
    runbook: str,
    kind: Literal[
        "process-kill",
        "gpu-fault",
        "region-outage",
        "corrupted-replica",
        "approval-timeout",
        "stale-primary",
        "serving-kill",
        "serving-stale-standby",
        "serving-degraded",
        "serving-rto",
        "batch-resume",
        "zombie-primary",
        "failback",
        "nccl-hang",
        "cuda-error",
        "fleet",
        "all",
    ] = "all",
    scope: Literal["az", "region"] | None = None,
    trainer: Literal["numpy", "torch"] = "numpy",
    hang_in: Literal["step", "save"] | None = None,
) -> list[dict[str, Any]]:
    """Rehearse a failure in a sandbox (never production) and prove the failover handled it.

    Args:
        runbook: Path of the runbook YAML on the worker.
        kind: Which failure to rehearse, or all of them in turn (`fleet`, three copies of the
            runbook failing over on a secondary with room for two, only when named).
        scope: region-outage only: block the primary's zone (az) or its whole region.
        trainer: The sandbox job: the numpy trainer (every kind), or a PyTorch job under
            torchrun with DCP checkpoints (process-kill; needs the torch extra).
        hang_in: nccl-hang only: stop rank 1 in a training step or in a periodic checkpoint
            save; unset, the drill's seed picks.
    """
    from lifeboat_dr.runbooks.loader import load_runbook

    rb = load_runbook(runbook)
    results = []
    for k in kinds_for(kind, rb, trainer):
        result = (
            _fleet_drill(rb)
            if k == FLEET_KIND
            else run_drill(
                rb,
                k,
                failover=run_failover,
                scope=scope if k == "region-outage" else None,
                trainer=trainer,
                options={"hang_in": hang_in} if k == "nccl-hang" and hang_in else None,
            )
        )
        print("\n".join(result.lines()))
        _publish(rb.name, result)
        results.append(result)
    failed = [r for r in results if not r.passed]
    if failed:
        raise DrillFailed(
            f"{len(failed)} of {len(results)} drill(s) failed:\n"
            + "\n".join(line for r in results for line in r.lines())
        )
    return [r.to_dict() for r in results]
