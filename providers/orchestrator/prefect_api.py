"""Prefect's API, as Lifeboat uses it: resume or cancel a paused run, read and write its inputs
(what a gate asks, whether it accepted a decision), cancel pending runs, emit an event, read
a secret, create the work pools (their job templates locked) and judge existing ones. The
runbook's failover lock is not Prefect's: anyone who reaches the API could set a concurrency
slot (`lifeboat_dr.core.lock`).
The one module that calls these Prefect APIs; it maps Prefect's
errors once, to Lifeboat's:

- `NotFound`: no such run (or deployment, or secret block);
- `PreconditionFailed`: the run is not paused (already decided, finished, timed out);
- `ConfigError`: no Prefect API configured where one is needed;
- `ProviderUnavailable`: the API did not answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from lifeboat_dr.kernel.errors import (
    ConfigError,
    NotFound,
    PreconditionFailed,
    ProviderUnavailable,
)
from lifeboat_dr.kernel.text import one_line

PENDING_STATES = ("SCHEDULED", "PENDING", "PAUSED")  # not started, or waiting for approval


def _run_id(run_id: str | UUID) -> UUID:
    try:
        return run_id if isinstance(run_id, UUID) else UUID(str(run_id))
    except ValueError:
        raise ConfigError(f"{run_id!r} is not a flow run id (a UUID, as on the approval card)") from None


def require_api_url() -> None:
    """Refuse to go on without PREFECT_API_URL: Prefect would start an empty temporary server."""
    from prefect.settings import get_current_settings

    if not get_current_settings().api.url:
        raise ConfigError("PREFECT_API_URL is not set: point it at the Prefect server running the failover")


def require_api() -> None:
    """The Prefect API answers (`PrefectUnreachable`, one line naming the URL, when it does
    not): asked before a command says what it is about to do there."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        error = client.api_healthcheck()
    if error is not None:
        raise unreachable(error) or unavailable(error)


def resume_run(run_id: str | UUID, run_input: dict[str, Any]) -> None:
    """Resume a run paused for input with `run_input` (validated by the run's input model)."""
    from prefect.exceptions import FlowPauseTimeout, NotPausedError, ObjectNotFound
    from prefect.flow_runs import resume_flow_run

    rid = _run_id(run_id)
    try:
        resume_flow_run(rid, run_input=run_input, _sync=True)
    except ObjectNotFound:
        raise NotFound(f"no flow run {rid} on this Prefect server") from None
    except NotPausedError:
        raise PreconditionFailed(
            f"run {rid} is not waiting for approval (already decided, or finished)"
        ) from None
    except FlowPauseTimeout:
        raise PreconditionFailed(f"run {rid} waited too long and can no longer be resumed") from None
    except (OSError, *_http_errors()) as e:
        if getattr(getattr(e, "response", None), "status_code", 0) in (401, 403):
            raise ConfigError(
                "Prefect (or the identity proxy in front of it) refused your credentials: "
                "set PREFECT_API_AUTH_STRING (login:password at the proxy)"
            ) from None
        raise unavailable(e) from None


async def resume_run_answer(run_id: str | UUID, run_input: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Ask Prefect to resume `run_id` and return its HTTP status and orchestration answer
    as is (accepted, or refused because the run is not paused or the input does not fit),
    for a front door that relays Prefect's answer to the UI or the Prefect client."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    rid = _run_id(run_id)
    try:
        async with get_client() as client:
            response = await client.request(
                "POST", "/flow_runs/{id}/resume", path_params={"id": rid}, json={"run_input": run_input}
            )
            return response.status_code, response.json()
    except ObjectNotFound:
        raise NotFound(f"no flow run {rid} on this Prefect server") from None
    except (OSError, *_http_errors()) as e:
        if getattr(getattr(e, "response", None), "status_code", 0) == 404:
            raise NotFound(f"no flow run {rid} on this Prefect server") from None
        raise unavailable(e) from None


def send_decision(run_id: str | UUID, run_input: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Resume `run_id` with a person's `run_input` through the identity proxy (PREFECT_API_URL):
    Prefect's orchestration answer and the run input where the flow will say whether it
    accepted the decision (the proxy's `lifeboat serve` names it; None when nothing signed it:
    the request went straight to Prefect)."""
    from prefect.client.orchestration import get_client

    rid = _run_id(run_id)
    try:
        with get_client(sync_client=True) as client:
            response = client.request(
                "POST", "/flow_runs/{id}/resume", path_params={"id": rid}, json={"run_input": run_input}
            )
            return response.json(), response.headers.get("x-lifeboat-verdict-key") or None
    except (OSError, *_http_errors()) as e:
        status = getattr(getattr(e, "response", None), "status_code", 0)
        if status in (401, 403):
            raise ConfigError(
                "Prefect (or the identity proxy in front of it) refused your credentials: "
                "set PREFECT_API_AUTH_STRING (login:password at the proxy)"
            ) from None
        if status == 404:
            raise NotFound(f"no flow run {rid} on this Prefect server") from None
        if status == 409:
            raise PreconditionFailed(_detail(e)) from None
        raise unavailable(e) from None


def _detail(e: BaseException) -> str:
    try:
        return str(e.response.json()["detail"])[:300]  # type: ignore[attr-defined]
    except Exception:
        return str(e)[:300]


def tag_run(run_id: str | UUID, tags: list[str]) -> None:
    """Add `tags` to a flow run (labels to filter by in the UI; never read back by code)."""
    from prefect.client.orchestration import get_client

    rid = _run_id(run_id)
    try:
        with get_client(sync_client=True) as client:
            current = client.read_flow_run(rid).tags or []
            client.update_flow_run(rid, tags=sorted({*current, *tags}))
    except (OSError, *_http_errors()) as e:
        raise unavailable(e) from None


def _http_errors() -> tuple[type[BaseException], ...]:
    import httpx

    return (httpx.HTTPError,)


class PrefectUnreachable(ProviderUnavailable):
    """Prefect's API did not answer (refused, timed out, no such host): retryable, so a
    command exits 75 (EX_TEMPFAIL)."""

    exit_code = 75


def api_url() -> str:
    """Where this process sends Prefect API calls, for messages."""
    from prefect.settings import get_current_settings

    return get_current_settings().api.url or "a temporary local server (PREFECT_API_URL is not set)"


def unavailable(e: BaseException) -> ProviderUnavailable:
    """The one-line error for a Prefect API call that failed with `e`, naming the URL:
    `PrefectUnreachable` when nothing answered, else `ProviderUnavailable` (a 5xx, a bad reply)."""
    import httpx

    if isinstance(e, OSError | httpx.TransportError):
        return PrefectUnreachable(
            f"Prefect API at {api_url()} did not answer: {type(e).__name__}: {one_line(e)}"
        )
    return ProviderUnavailable(f"Prefect API at {api_url()}: {type(e).__name__}: {one_line(e)}")


def unreachable(error: BaseException) -> PrefectUnreachable | None:
    """`PrefectUnreachable` when `error`, or an error it was raised from, says Prefect's API
    could not be reached (an httpx transport error, Prefect's own `RuntimeError: Failed to
    reach API`, or its temporary server that did not start); None for any other error, which is a bug to show whole."""
    import httpx

    seen: set[int] = set()
    e: BaseException | None = error
    reached_for = False
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, httpx.TransportError):
            return PrefectUnreachable(str(unavailable(e)))
        reached_for |= isinstance(e, RuntimeError) and str(e).startswith("Failed to reach API")
        if isinstance(e, RuntimeError) and "ephemeral Prefect API server" in str(e):
            return PrefectUnreachable(
                "the temporary Prefect server Prefect starts when PREFECT_API_URL is unset did not "
                "come up (PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, default 20): set "
                "PREFECT_API_URL to a running server"
            )
        e = e.__cause__ or e.__context__
    return PrefectUnreachable(f"Prefect API at {api_url()} did not answer") if reached_for else None


def emit(event: str, resource: dict[str, str], payload: dict[str, Any], **kw: Any) -> None:
    """Emit a Prefect event (the events client batches in the background)."""
    from prefect.events import emit_event

    emit_event(event=event, resource=resource, payload=payload, **kw)


def drain_events(timeout_s: float) -> None:
    """Wait up to `timeout_s` for the events client to send what `emit` queued (a process
    about to exit: the client sends in the background)."""
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=timeout_s)


def emit_spec(spec) -> None:
    """Emit an outage decision's event (`lifeboat_dr.core.detection.events.EventSpec`); its stable id
    makes a decision emitted twice (two receivers, a retry) stored once."""
    emit(
        spec.event,
        spec.resource,
        spec.payload,
        id=spec.id,
        occurred=spec.occurred,
        related=spec.related or None,
    )


def secret(block_name: str) -> str:
    """A Prefect `Secret` block's value."""
    from prefect.blocks.system import Secret

    try:
        return str(Secret.load(block_name).get())
    except ValueError as e:  # Prefect raises ValueError for a block that does not exist
        raise NotFound(f"no Prefect Secret block {block_name!r}: {e}") from None
    except (OSError, *_http_errors()) as e:
        raise unavailable(e) from None


MAX_RUN_INPUT = 64 * 1024


def publish_run_input(run_id: str | UUID, key: str, value: Any) -> None:
    """Write the flow run input `key` of `run_id` as JSON, replacing one of that key."""
    import json

    from prefect.client.orchestration import get_client

    rid = _run_id(run_id)
    try:
        with get_client(sync_client=True) as client:
            try:
                client.delete_flow_run_input(rid, key)
            except Exception as e:  # none yet: Prefect answers 404
                if getattr(getattr(e, "response", None), "status_code", 404) != 404:
                    raise
            client.create_flow_run_input(rid, key, json.dumps(value))
    except (OSError, *_http_errors()) as e:
        raise unavailable(e) from None


def read_run_input(run_id: str | UUID, key: str) -> Any:
    """The flow run input `key` of `run_id`, parsed; None when there is none (or it is not JSON,
    or over `MAX_RUN_INPUT`)."""
    import json

    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    rid = _run_id(run_id)
    try:
        with get_client(sync_client=True) as client:
            text = client.read_flow_run_input(rid, key)
    except ObjectNotFound:
        return None
    except (OSError, *_http_errors()) as e:
        if getattr(getattr(e, "response", None), "status_code", 0) == 404:
            return None
        raise unavailable(e) from None
    if not isinstance(text, str) or len(text) > MAX_RUN_INPUT:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


async def cancel_run_answer(run_id: str | UUID, message: str) -> tuple[int, dict[str, Any]]:
    """Set `run_id` Cancelling (Prefect's Cancel) with `message`; Prefect's status and answer as is."""
    from prefect.client.orchestration import get_client

    rid = _run_id(run_id)
    body = {"state": {"type": "CANCELLING", "name": "Cancelling", "message": message}, "force": True}
    try:
        async with get_client() as client:
            response = await client.request(
                "POST", "/flow_runs/{id}/set_state", path_params={"id": rid}, json=body
            )
            return response.status_code, response.json()
    except (OSError, *_http_errors()) as e:
        if getattr(getattr(e, "response", None), "status_code", 0) == 404:
            raise NotFound(f"no flow run {rid} on this Prefect server") from None
        raise unavailable(e) from None


async def cancel_pending_runs(
    deployment: str, runbook_names: Iterable[str], reason: str, *, log=None
) -> list[str]:
    """Cancel `deployment`'s runs for one of `runbook_names` (its `runbook` parameter) that
    have not started or wait for approval. A Running one is never touched: the failover is
    under way and only a human stops it."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Cancelled

    names = set(runbook_names)
    pending = [StateType(s) for s in PENDING_STATES]
    cancelled: list[str] = []
    async with get_client() as client:
        try:
            dep = await client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            return []
        runs = await client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep.id])),
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=pending))
            ),
        )
        for run in runs:
            if str(run.parameters.get("runbook")) not in names:
                continue
            current = await client.read_flow_run(run.id)  # re-read: it may have started meanwhile
            if current.state is None or current.state.type not in pending:
                continue
            await client.set_flow_run_state(run.id, Cancelled(message=reason))
            if log is not None:
                log.info("cancelled pending failover run %s: %s", run.id, reason)
            cancelled.append(str(run.id))
    return cancelled


# The job variables a run must not set: what the worker runs, with which environment, where.
LOCKED_FIELDS = ("command", "env", "working_dir")


def locked_job_template() -> dict[str, Any]:
    """Prefect's process job template without `command`, `env` and `working_dir`: the worker
    starts Prefect's own engine for the deployment's flow (no command of the run's), with the
    worker's own environment (no variable of the run's, such as PYTHONPATH: Prefect merges a
    run's `env` into any env the template fixes, so the template fixes none), in a fresh
    temporary folder (no folder of the run's, whose modules would shadow Prefect's). A run
    may still name its process, label it and stream its output. Settings every flow run
    needs (the flow heartbeat) therefore come from the worker's environment."""
    from prefect.workers.process import ProcessWorker

    template = ProcessWorker.get_default_base_job_template()
    config = {k: v for k, v in template["job_configuration"].items() if k not in LOCKED_FIELDS}
    variables = dict(template["variables"])
    variables["properties"] = {k: v for k, v in variables["properties"].items() if k not in LOCKED_FIELDS}
    return {"job_configuration": config, "variables": variables}


def overridable_fields(template: dict[str, Any] | None) -> list[str]:
    """Which of `command`, `env`, `working_dir` a run's job variables can set in a pool with
    this base job template: any the template names at all (a `{{ placeholder }}` takes the
    run's value, and a fixed `env` mapping is merged with the run's)."""
    config = (template or {}).get("job_configuration") or {}
    return [f for f in LOCKED_FIELDS if f in config]


def ensure_process_pool(name: str) -> str:
    """Create process work pool `name` with `locked_job_template` unless it exists: "created"
    or "exists". An existing pool keeps its template (`pool_warnings` says when a run can
    override it); a pool of another type is refused, not changed."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            pool = client.read_work_pool(name)
        except ObjectNotFound:
            pool = None
        except (OSError, *_http_errors()) as e:
            raise unavailable(e) from None
        if pool is not None:
            if pool.type != "process":
                raise ConfigError(f"work pool {name!r} exists with type {pool.type!r}, not 'process'")
            return "exists"
        try:
            client.create_work_pool(
                WorkPoolCreate(name=name, type="process", base_job_template=locked_job_template())
            )
        except ObjectAlreadyExists:  # created by a racing deploy
            return "exists"
        except (OSError, *_http_errors()) as e:
            raise unavailable(e) from None
        return "created"


def pool_warnings(pools: Iterable[str] | None = None) -> list[str]:
    """One line per work pool whose job template lets a run set its command, env or working
    directory (so anyone who can create a run there makes its worker run anything): `pools`,
    or those every deployment of a Lifeboat flow runs on. A pool that cannot be read is a line
    too; no Prefect API, no lines."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import get_current_settings

    if not get_current_settings().api.url:
        return []
    lines = []
    try:
        with get_client(sync_client=True) as client:
            if pools is None:
                deployments = client.read_deployments()
                pools = {
                    d.work_pool_name
                    for d in deployments
                    if d.work_pool_name and (d.entrypoint or "").startswith("lifeboat_dr.flows.")
                }
            for name in sorted(set(pools)):
                try:
                    pool = client.read_work_pool(name)
                except ObjectNotFound:
                    continue
                if open_fields := overridable_fields(pool.base_job_template):
                    lines.append(
                        f"work pool {name!r} lets a run set its {', '.join(open_fields)}: anyone who can "
                        "create a flow run there makes its worker run any command; recreate it with "
                        "`lifeboat deploy` (after `prefect work-pool delete`), or fix those fields in its "
                        "base job template (docs/approvals.md)"
                    )
    except (OSError, *_http_errors()) as e:
        lines.append(f"could not read the work pools: {unavailable(e)}")
    return lines


CRASH_AUTOMATION = "lifeboat-failover-crashed"
RERUN_AUTOMATION = "lifeboat-failover-rerun"


def ensure_crash_recovery(flow_name: str = "failover", *, heartbeat_s: int = 30, misses: int = 2) -> None:
    """(Re)create the two automations that finish a failover whose worker died: a `flow_name`
    run that sends no heartbeat for `misses` × `heartbeat_s` (its flow runs must beat every
    `heartbeat_s`: PREFECT_FLOWS_HEARTBEAT_FREQUENCY) is marked Crashed; a Crashed one is set
    Scheduled again, so any worker of the pool re-runs it under the same run id (the failover
    is idempotent by run id)."""
    from datetime import timedelta

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture

    flow = {"prefect.resource.role": "flow", "prefect.resource.name": flow_name}
    runs = {"prefect.resource.id": "prefect.flow-run.*"}
    crashed = AutomationCore(
        name=CRASH_AUTOMATION,
        description=f"A {flow_name} run silent for {misses} heartbeats has lost its worker: Crashed.",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            # a beat, or any state: Prefect names the event after the state's name
            # ("prefect.flow-run.Stood down"), not its type
            expect={"prefect.flow-run.*"},
            match=runs,
            match_related=flow,
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=misses * heartbeat_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED, message=f"no heartbeat for {misses * heartbeat_s}s: worker lost"
            )
        ],
    )
    rerun = AutomationCore(
        name=RERUN_AUTOMATION,
        description=f"A crashed {flow_name} run is scheduled again: a worker re-runs it under the same id.",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Crashed"},
            match=runs,
            match_related=flow,
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.SCHEDULED,
                message="re-run after a crash (lifeboat-failover-rerun)",
                force=True,
            )
        ],
    )
    try:
        with get_client(sync_client=True) as client:
            for automation in (crashed, rerun):
                for old in client.read_automations_by_name(automation.name):
                    client.delete_automation(old.id)
                client.create_automation(automation)
    except (OSError, *_http_errors()) as e:
        raise unavailable(e) from None


FLEET_DEPLOYMENT = "fleet-failover/fleet-failover"
FLEET_CALL_S = 5.0  # one attempt of a grouping call; two attempts (+1 s backoff) before it is unknown


@contextmanager
def _bounded_client(attempt_s: float):
    """A client of its own (not the flow engine's, from the run's context) whose calls give up
    after 2 attempts of `attempt_s`: a Prefect that hangs costs a grouping failover about
    2 x `attempt_s` + 1 s, not the default 6 x 60 s (`PREFECT_API_REQUEST_TIMEOUT`, 5 retries,
    a read timeout among the retried)."""
    import httpx
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, temporary_settings

    with (
        temporary_settings({PREFECT_CLIENT_MAX_RETRIES: 1}),
        get_client(httpx_settings={"timeout": httpx.Timeout(attempt_s)}, sync_client=True) as client,
    ):
        yield client


def start_run_once(deployment: str, parameters: dict[str, Any], key: str) -> str:
    """Create a run of `deployment` ("flow/deployment") with `parameters`, once per `key`:
    Prefect returns the run already created with that idempotency key (a retry, a reclaimer)
    rather than a second one. The run's id. A Prefect that does not answer within the
    `FLEET_CALL_S` bound is `ProviderUnavailable` (the run may or may not exist: the key says)."""
    from prefect.exceptions import ObjectNotFound

    try:
        with _bounded_client(FLEET_CALL_S) as client:
            found = client.read_deployment_by_name(deployment)
            run = client.create_flow_run_from_deployment(found.id, parameters=parameters, idempotency_key=key)
    except ObjectNotFound:
        raise NotFound(
            f"no deployment {deployment} on Prefect at {api_url()}: run `lifeboat deploy`"
        ) from None
    except (OSError, *_http_errors()) as e:
        raise unavailable(e) from None
    return str(run.id)


def run_ended(run_id: str | UUID) -> bool:
    """Whether the flow run has reached a final state (completed, failed, cancelled, crashed).
    It only decides whether a later outage groups afresh; no member's fencing, quorum or
    approval rests on it."""
    from prefect.exceptions import ObjectNotFound

    try:
        with _bounded_client(FLEET_CALL_S) as client:
            run = client.read_flow_run(_run_id(run_id))
    except ObjectNotFound:
        raise NotFound(f"no flow run {run_id} on Prefect at {api_url()}") from None
    except (OSError, *_http_errors()) as e:
        raise unavailable(e) from None
    return run.state is not None and run.state.is_final()
