"""Prefect's API, as Lifeboat uses it: resume or cancel a paused run, read and write its inputs
(what a gate asks, whether it accepted a decision), cancel pending runs, emit an event, read
a secret, hold a runbook's failover lock, create the work pool.
The one module that calls these Prefect APIs; it maps Prefect's
errors once, to Lifeboat's:

- `NotFound`: no such run (or deployment, or secret block);
- `PreconditionFailed`: the run is not paused (already decided, finished, timed out);
- `ConfigError`: no Prefect API configured where one is needed;
- `ProviderUnavailable`: the API did not answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import ExitStack, contextmanager
from typing import Any
from uuid import UUID

from lifeboat_dr.kernel.errors import (
    ConfigError,
    NotFound,
    PreconditionFailed,
    ProviderUnavailable,
    StandDown,
)

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
        raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None


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
        raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None


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
        raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None


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
        raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None


def _http_errors() -> tuple[type[BaseException], ...]:
    import httpx

    return (httpx.HTTPError,)


def emit(event: str, resource: dict[str, str], payload: dict[str, Any], **kw: Any) -> None:
    """Emit a Prefect event (the events client batches in the background)."""
    from prefect.events import emit_event

    emit_event(event=event, resource=resource, payload=payload, **kw)


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
        raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None


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
        raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None


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
        raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None
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
        raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None


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


@contextmanager
def runbook_lock(
    runbook: str, run_id: str | UUID, *, wait_s: float = 2.0, lease_s: float = 60.0, slow_s: float = 30.0
):
    """Hold the one slot of the global concurrency limit `lifeboat-failover-<runbook>` for
    the body: one failover per runbook at a time. The slot is a lease that the holder renews
    in the background: a worker that crashes lets it lapse after `lease_s` (Prefect's minimum is 60 s),
    so a re-run can take it. A slot still held after `wait_s` raises `StandDown`; a free slot
    that a slow server has not granted by then is asked for again, for up to `slow_s` in all
    (then `ProviderUnavailable`)."""
    from prefect.client.orchestration import get_client
    from prefect.concurrency.sync import concurrency
    from prefect.exceptions import ObjectAlreadyExists

    name = f"lifeboat-failover-{runbook}"
    with get_client(sync_client=True) as client:
        try:
            client.upsert_global_concurrency_limit_by_name(name, 1)
        except ObjectAlreadyExists:  # created by a racing run between its read and its create
            pass
        except (OSError, _http_errors()) as e:
            raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None
    from prefect.client.schemas.objects import ConcurrencyLeaseHolder

    holder = ConcurrencyLeaseHolder(type="flow_run", id=_run_id(run_id))
    give_up = time.monotonic() + slow_s
    with ExitStack() as stack:
        while True:
            try:
                stack.enter_context(
                    concurrency(
                        name,
                        occupy=1,
                        timeout_seconds=wait_s,
                        lease_duration=lease_s,
                        strict=True,
                        holder=holder,
                    )
                )
                break
            except TimeoutError:
                if _slot_held(name):
                    raise StandDown(
                        f"another failover of {runbook} holds its lock ({name}): this run changes nothing"
                    ) from None
                if time.monotonic() > give_up:
                    raise ProviderUnavailable(
                        f"Prefect API: the free lock {name} was not granted within {slow_s:g}s"
                    ) from None
        yield


def _slot_held(name: str) -> bool:
    """Whether the global concurrency limit `name` has its slot taken (a failed read: taken)."""
    from prefect.client.orchestration import get_client

    try:
        with get_client(sync_client=True) as client:
            return client.read_global_concurrency_limit_by_name(name).active_slots > 0
    except Exception:  # unreadable: the safe reading is that another run holds it
        return True


def ensure_process_pool(name: str) -> bool:
    """Create process work pool `name` (Prefect's default job template) unless it exists;
    True when it was created. A pool of another type is refused, not changed."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
    from prefect.workers.process import ProcessWorker

    with get_client(sync_client=True) as client:
        try:
            pool = client.read_work_pool(name)
        except ObjectNotFound:
            pass
        except (OSError, _http_errors()) as e:
            raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None
        else:
            if pool.type != "process":
                raise ConfigError(f"work pool {name!r} exists with type {pool.type!r}, not 'process'")
            return False
        template = ProcessWorker.get_default_base_job_template()
        try:
            client.create_work_pool(WorkPoolCreate(name=name, type="process", base_job_template=template))
        except ObjectAlreadyExists:  # created by a racing deploy
            return False
        except (OSError, _http_errors()) as e:
            raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None
        return True


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
            expect={
                "prefect.flow-run.heartbeat",
                "prefect.flow-run.Completed",
                "prefect.flow-run.Failed",
                "prefect.flow-run.Cancelled",
                "prefect.flow-run.Crashed",
                "prefect.flow-run.Paused",
            },
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
    except (OSError, _http_errors()) as e:
        raise ProviderUnavailable(f"Prefect API: {type(e).__name__}: {e}") from None
