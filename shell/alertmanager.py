"""`POST /alerts/alertmanager`: the Alertmanager webhook receiver, as Starlette routes.

    app = create_app([*alertmanager_routes(AlertmanagerSettings.from_env(runbooks=[...]))])

What one request does, in order: authenticate (bearer or basic, else 401), refuse bodies
over `max_body_bytes` (413: the declared length before reading, a chunked body as soon as
it passes the cap), decode strictly (400: not UTF-8, not JSON, nested over 32 levels;
see shell/inbound.py), validate the webhook v4 schema (400, naming the fields), then
for every alert: emit `lifeboat.alert.{firing,resolved}` once per groupKey + fingerprint +
firing (duplicates are counted, not emitted), record its reading in the runbook's signal
log and let the quorum decide; a decision that changes state is emitted as
`lifeboat.outage.*`, which is what the failover automation listens for. When resolved
alerts leave fewer than `quorum` signals failing, pending failover runs of that runbook
(Scheduled, Pending, or Paused waiting for approval) are cancelled; a Running one never is.

Event ids are derived from the alert (or the outage episode), and the Prefect server
ignores an event id it has seen in the last 30 minutes, so two receivers, or a receiver
restarted mid-storm, still trigger one failover. Alertmanager side:

    receivers:
      - name: lifeboat
        webhook_configs:
          - url: http://lifeboat.internal:8900/alerts/alertmanager
            send_resolved: true          # resolution is what cancels a pending failover
            max_alerts: 50               # the rest arrive as truncatedAlerts
            http_config:
              authorization: {credentials_file: /etc/alertmanager/lifeboat-token}
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import os
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, SecretStr, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from lifeboat_dr.core.detection.alerts import (
    AlertmanagerWebhook,
    Seen,
    SourceScope,
    alert_event_id,
    alert_reading,
    dedupe_key,
    runbook_of,
)
from lifeboat_dr.core.detection.events import EventSpec, outage_event, runbook_resource
from lifeboat_dr.core.detection.quorum import QuorumPolicy
from lifeboat_dr.core.detection.shared_state import open_seen, open_signal_log
from lifeboat_dr.core.detection.signals import Clock, utc_now
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.kernel.text import one_line
from lifeboat_dr.providers.orchestrator.prefect_api import emit_spec as emit
from lifeboat_dr.shell.inbound import BadRequest, parse_json
from lifeboat_dr.shell.server import read_body

log = logging.getLogger("lifeboat.alerts")


class AlertmanagerSettings(BaseModel):
    """How the receiver authenticates and which runbooks it guards. Secrets are never logged."""

    bearer_token: SecretStr | None = Field(
        None, description="Token Alertmanager sends as `Authorization: Bearer` (http_config.authorization)."
    )
    basic_username: str | None = Field(None, description="User for HTTP basic auth (http_config.basic_auth).")
    basic_password: SecretStr | None = Field(None, description="Password for HTTP basic auth.")
    max_body_bytes: int = Field(1 << 20, gt=0, description="Larger webhook bodies are refused with 413.")
    runbooks: list[Path] = Field(default_factory=list, description="Runbook files this receiver guards.")
    default_runbook: str | None = Field(
        None, description="Runbook name for alerts without a `lifeboat_runbook` label."
    )
    state_dir: Path | str | None = Field(
        None,
        description="Signal log folder, or a store URI shared by every replica and `watch` "
        "(default LIFEBOAT_STATE_DIR).",
    )
    alert_hold: timedelta = Field(
        timedelta(hours=4, minutes=15),
        description="A firing alert counts this long without being re-sent: keep Alertmanager's "
        "repeat_interval (default 4h) below it.",
    )
    source_scope: SourceScope = Field(
        "group",
        description="What counts as one independent source for the quorum: `group` (one "
        "Alertmanager alert group, whatever signals its alerts claim) or `endpoint` (everything "
        "this receiver gets: a quorum then also needs a probe, so the webhook token alone cannot "
        "confirm an outage).",
    )
    failover_deployment: str = Field(
        "failover/failover", description="`flow/deployment` whose pending runs a resolved alert cancels."
    )

    @classmethod
    def from_env(cls, **fields: Any) -> AlertmanagerSettings:
        """Credentials from LIFEBOAT_ALERTMANAGER_TOKEN or _USER/_PASSWORD, the source scope
        from LIFEBOAT_ALERTMANAGER_SOURCE_SCOPE, unless given."""
        env = os.environ
        fields.setdefault("bearer_token", env.get("LIFEBOAT_ALERTMANAGER_TOKEN") or None)
        fields.setdefault("basic_username", env.get("LIFEBOAT_ALERTMANAGER_USER") or None)
        fields.setdefault("basic_password", env.get("LIFEBOAT_ALERTMANAGER_PASSWORD") or None)
        if env.get("LIFEBOAT_ALERTMANAGER_SOURCE_SCOPE"):
            fields.setdefault("source_scope", env["LIFEBOAT_ALERTMANAGER_SOURCE_SCOPE"])
        return cls(**fields)

    @staticmethod
    def token_from_prefect_secret(block_name: str) -> SecretStr:
        """The bearer token from a Prefect `Secret` block (loaded once, at start-up)."""
        from lifeboat_dr.providers.orchestrator.prefect_api import secret

        return SecretStr(secret(block_name))


CancelFn = Callable[[str, str, list[str], str], Awaitable[list[str]]]


def alertmanager_routes(
    settings: AlertmanagerSettings,
    *,
    emit_event: Callable[[EventSpec], None] = emit,
    cancel: CancelFn | None = None,
    clock: Clock = utc_now,
) -> list[Route]:
    """The receiver's routes. `emit_event` and `cancel` default to the Prefect API."""
    if not settings.bearer_token and not (settings.basic_username and settings.basic_password):
        raise ConfigError(
            "the Alertmanager receiver needs credentials: set LIFEBOAT_ALERTMANAGER_TOKEN "
            "(or LIFEBOAT_ALERTMANAGER_USER and LIFEBOAT_ALERTMANAGER_PASSWORD)"
        )
    guarded = _load_runbooks(settings.runbooks)
    cancel = cancel or cancel_pending_failovers
    seen = open_seen(settings.state_dir, clock=clock) or Seen(clock=clock)

    async def receive(request: Request) -> JSONResponse:
        if not _authorized(request.headers.get("authorization", ""), settings):
            return JSONResponse(
                {"error": "unauthorized"}, 401, headers={"WWW-Authenticate": 'Bearer, Basic realm="lifeboat"'}
            )
        try:
            body = await read_body(request, settings.max_body_bytes)
            group = AlertmanagerWebhook.model_validate(parse_json(body))
        except BadRequest as e:
            return JSONResponse({"error": e.reason}, e.status)
        except ValidationError as e:
            problems = [f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}" for err in e.errors()]
            return JSONResponse({"error": "not an Alertmanager v4 webhook", "problems": problems}, 400)

        now = clock()
        result: dict[str, Any] = {
            "events": 0,
            "duplicates": 0,
            "ignored": [],
            "runbooks": {},
            "cancelled": [],
        }
        if group.truncatedAlerts:
            log.warning("%s: %d alert(s) truncated by Alertmanager", group.groupKey, group.truncatedAlerts)
            result["truncated"] = group.truncatedAlerts
        per_runbook: dict[str, list] = {}
        for alert in group.alerts:
            name = runbook_of(alert, group, settings.default_runbook)
            if name not in guarded:
                result["ignored"].append(
                    {"fingerprint": alert.fingerprint, "why": f"no runbook {one_line(name, 80)!r} here"}
                )
                continue
            reading = alert_reading(alert, group, now, settings.alert_hold, settings.source_scope)
            per_runbook.setdefault(name, []).append(reading)
            key = dedupe_key(group, alert)
            if not await run_in_threadpool(seen.first, key):
                result["duplicates"] += 1
                continue
            emit_event(
                EventSpec(
                    f"lifeboat.alert.{alert.status}",
                    runbook_resource(name, guarded[name][1]),
                    {"reading": reading.to_dict(), "receiver": group.receiver},
                    alert_event_id(key),
                    now,
                )
            )
            result["events"] += 1

        for name, readings in per_runbook.items():
            policy, path = guarded[name]
            signal_log = open_signal_log(name, settings.state_dir, clock=clock)
            decision = await run_in_threadpool(signal_log.observe, readings, policy)
            result["runbooks"][name] = decision.summary
            spec = outage_event(decision, name, path)
            if spec:
                emit_event(spec)
                result["events"] += 1
            resolved = any(not r.failing for r in readings)
            if resolved and decision.independent < policy.quorum:
                why = f"alert resolved; {decision.summary}"
                cancelled = await cancel(settings.failover_deployment, name, _aliases(path), why)
                if cancelled:  # called off before approval: a renewed quorum must fail over again
                    await run_in_threadpool(signal_log.stand_down, why)
                result["cancelled"] += cancelled
        return JSONResponse(result)

    return [Route("/alerts/alertmanager", receive, methods=["POST"])]


def _load_runbooks(paths: list[Path]) -> dict[str, tuple[QuorumPolicy, str]]:
    from lifeboat_dr.runbooks.loader import load_runbook

    out = {}
    for p in paths:
        rb = load_runbook(p)
        out[rb.name] = (QuorumPolicy.from_detection(rb.detection), str(p))
    return out


def _aliases(path: str) -> list[str]:
    return sorted({path, str(Path(path).resolve())})


def _authorized(header: str, s: AlertmanagerSettings) -> bool:
    scheme, _, value = header.partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == "bearer" and s.bearer_token:
        return hmac.compare_digest(value.encode(), s.bearer_token.get_secret_value().encode())
    if scheme == "basic" and s.basic_username and s.basic_password:
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        expected = s.basic_password.get_secret_value().encode()
        return hmac.compare_digest(user.encode(), s.basic_username.encode()) & hmac.compare_digest(
            password.encode(), expected
        )
    return False


async def cancel_pending_failovers(
    deployment: str, runbook: str, aliases: list[str], reason: str
) -> list[str]:
    """Cancel this runbook's failover runs that have not started (not yet approved)."""
    from lifeboat_dr.providers.orchestrator.prefect_api import cancel_pending_runs

    return await cancel_pending_runs(deployment, [runbook, *aliases], reason, log=log)
