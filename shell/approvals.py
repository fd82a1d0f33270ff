"""The routes behind the identity proxy: decisions (`POST /api/flow_runs/{id}/resume`) and
Prefect's Cancel (`POST /api/flow_runs/{id}/set_state`) from the Prefect UI and
`lifeboat approve`, each with the identity the proxy verified.

An open-source Prefect server knows no users (`PREFECT_SERVER_API_AUTH_STRING` is one shared
password), so the identity comes from a reverse proxy in front of it (SSO such as
oauth2-proxy, or HAProxy with a userlist: `deploy/haproxy/lifeboat.cfg`). The proxy sends
these two routes here instead of to Prefect, with two headers it sets itself after removing
any a client sent: the login it authenticated (`X-Lifeboat-User`) and a secret only it and
`lifeboat serve` know (`X-Lifeboat-Proxy-Secret`, so nobody reaching this port directly can
name a user).

A resume is signed with the approval signing key (Ed25519, `lifeboat_dr.core.approval_proof`)
for what the run's gate asks (its published `lifeboat-ask`: run, runbook, action, epoch) and
relayed to Prefect; the flow checks the signature and the runbook's allow-list
(`approval.logins`). The answer is Prefect's own, so the UI and the Prefect client behave as
if they had called Prefect, plus `X-Lifeboat-Verdict-Key`: the run input where the flow will
say whether it accepted the decision (`lifeboat approve` waits on it). A state change is let
through only as a Cancel (Cancelling/Cancelled), recorded with the login: anything else a
person could set (Running, Completed, Scheduled) would act around the gate.

Refusals change nothing: no or wrong proxy secret, or no identity → 401; a body over
`max_body` → 413 (before reading it); not JSON, bad UTF-8, not a run id, or no
`approved`/`reason`, or `jobs` (a fleet's per-job answer) not a list of names → 400; a state other than a Cancel → 403; no such run → 404; a run not at
a Lifeboat gate (no ask) → 409; Prefect down → 502.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field, SecretStr
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from lifeboat_dr.core.approval import viewer_may_decide
from lifeboat_dr.core.approval_proof import (
    ASK_KEY,
    DECIDERS_KEY,
    MAX_REASON,
    published_ask,
    sign_decision,
    verdict_key,
)
from lifeboat_dr.kernel.errors import ConfigError, NotFound, PreconditionFailed, ProviderUnavailable
from lifeboat_dr.kernel.text import one_line
from lifeboat_dr.providers.chat.base import ApprovalDecision, Via
from lifeboat_dr.shell.inbound import BadRequest, parse_json
from lifeboat_dr.shell.server import read_body

log = logging.getLogger("lifeboat.approvals")

Resume = Callable[[str, dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]
Cancel = Callable[[str, str], Awaitable[tuple[int, dict[str, Any]]]]
ReadAsk = Callable[[str], Any]
CANCEL_STATES = ("CANCELLING", "CANCELLED")  # Prefect's Cancel: the only state a person may set
VERDICT_HEADER = "x-lifeboat-verdict-key"


class ProxySettings(BaseModel):
    """What the proxied routes need (`lifeboat serve` reads LIFEBOAT_PROXY_SECRET)."""

    proxy_secret: SecretStr = Field(
        description="Shared with the proxy only; proves a request came through it."
    )
    identity_header: str = Field(
        "x-lifeboat-user", description="Header the proxy sets to the verified login."
    )
    secret_header: str = Field("x-lifeboat-proxy-secret", description="Header carrying the proxy secret.")
    max_body: int = Field(64 * 1024, description="Largest request body read, in bytes.")


async def _prefect_resume(run_id: str, run_input: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    from lifeboat_dr.providers.orchestrator.prefect_api import resume_run_answer

    return await resume_run_answer(run_id, run_input)


async def _prefect_cancel(run_id: str, message: str) -> tuple[int, dict[str, Any]]:
    from lifeboat_dr.providers.orchestrator.prefect_api import cancel_run_answer

    return await cancel_run_answer(run_id, message)


def _prefect_ask(run_id: str) -> Any:
    from lifeboat_dr.providers.orchestrator.prefect_api import read_run_input

    return read_run_input(run_id, ASK_KEY)


def _prefect_input(run_id: str, key: str) -> Any:
    from lifeboat_dr.providers.orchestrator.prefect_api import read_run_input

    return read_run_input(run_id, key)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status)


class ProxiedDecisions:
    def __init__(
        self,
        settings: ProxySettings,
        signing_key,
        *,
        resume: Resume | None = None,
        cancel: Cancel | None = None,
        ask: ReadAsk | None = None,
        read_input: Callable[[str, str], Any] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        if not settings.proxy_secret.get_secret_value() or signing_key is None:
            raise ConfigError(
                "the proxied decision routes need LIFEBOAT_PROXY_SECRET and LIFEBOAT_APPROVAL_SIGNING_KEY_FILE"
            )
        self.settings, self.key, self.clock = settings, signing_key, clock
        self.resume, self.cancel = resume or _prefect_resume, cancel or _prefect_cancel
        self.ask = ask or _prefect_ask
        self.read_input = read_input or _prefect_input
        self._secret = settings.proxy_secret.get_secret_value().encode()

    def _identity(self, request: Request) -> str | None:
        presented = request.headers.get(self.settings.secret_header, "").encode("latin-1", "replace")
        if not hmac.compare_digest(presented, self._secret):
            return None
        login = request.headers.get(self.settings.identity_header, "").strip()
        return login if 0 < len(login) <= 256 and login.isprintable() else None

    async def _read(self, request: Request) -> tuple[str, str, dict] | JSONResponse:
        """The verified login, the run id and the JSON body; or the refusal to answer."""
        login = self._identity(request)
        if login is None:
            log.warning("refused a decision that did not come through the identity proxy with a login")
            return _error(401, "Unauthorized: decisions are taken only through the identity proxy")
        try:
            body = parse_json(await read_body(request, self.settings.max_body))
            run_id = str(UUID(request.path_params["id"]))
        except BadRequest as e:
            return _error(e.status, e.reason)
        except ValueError:
            return _error(400, "not a flow run id")
        if not isinstance(body, dict):
            return _error(400, "expected a JSON object")
        return login, run_id, body

    async def resume_route(self, request: Request) -> JSONResponse:
        got = await self._read(request)
        if isinstance(got, JSONResponse):
            return got
        login, run_id, body = got
        run_input = body.get("run_input")
        approved = run_input.get("approved") if isinstance(run_input, dict) else None
        reason = run_input.get("reason") if isinstance(run_input, dict) else None
        if not isinstance(approved, bool) or not isinstance(reason, str) or not reason.strip():
            return _error(400, 'expected {"run_input": {"approved": true|false, "reason": "…"}}')
        jobs = run_input.get("jobs")  # a fleet's form: the placed jobs approved, signed with the rest
        if jobs is not None and not (isinstance(jobs, list) and all(isinstance(j, str) for j in jobs)):
            return _error(400, '"jobs" must be a list of job names')
        via = Via.cli if request.headers.get("user-agent", "").startswith("prefect/") else Via.ui
        decision = ApprovalDecision(
            approved=approved, reason=reason[:MAX_REASON], approver=login, via=via, jobs=jobs
        )
        try:
            ask = published_ask(await run_in_threadpool(self.ask, run_id), run_id)
            signed = sign_decision(self.key, ask, decision, self.clock())
            status, answer = await self.resume(run_id, signed)
        except NotFound as e:
            return _error(404, str(e))
        except PreconditionFailed as e:
            return _error(409, str(e))
        except ProviderUnavailable as e:
            return _error(502, str(e))
        log.info("%s %s run %s via %s", login, "approved" if approved else "rejected", run_id, via)
        return JSONResponse(answer, status_code=status, headers={VERDICT_HEADER: verdict_key(signed) or ""})

    async def card_route(self, request: Request) -> Response:
        """The approval screen's card (a paused run's form description), as Prefect serves it,
        headed by whether this viewer may decide (`viewer_may_decide`, from the run's published
        deciders): the Prefect UI shows one card to everyone, so the proxy sends its read here."""
        try:
            run_id = str(UUID(request.path_params["id"]))
        except ValueError:
            return _error(400, "not a flow run id")
        key = request.path_params["key"]
        presented = request.headers.get(self.settings.secret_header, "").encode("latin-1", "replace")
        if not hmac.compare_digest(presented, self._secret):
            return _error(401, "Unauthorized: the card is read only through the identity proxy")
        login = self._identity(request)
        if login is None:
            return _error(401, "log in through the identity proxy to see the card and whether you may decide")
        if not key.endswith("-description") or len(key) > 200:
            return _error(404, "Flow run input not found")
        try:
            card = await run_in_threadpool(self.read_input, run_id, key)
            deciders = await run_in_threadpool(self.read_input, run_id, DECIDERS_KEY)
        except ProviderUnavailable as e:
            return _error(502, str(e))
        if not isinstance(card, str):
            return _error(404, "Flow run input not found")
        shown = f"{viewer_may_decide(login, deciders)}\n\n{card}"
        return PlainTextResponse(json.dumps(shown))  # Prefect's own encoding of a run input

    async def cancel_route(self, request: Request) -> JSONResponse:
        got = await self._read(request)
        if isinstance(got, JSONResponse):
            return got
        login, run_id, body = got
        state = body.get("state")
        kind = state.get("type") if isinstance(state, dict) else None
        if kind not in CANCEL_STATES:
            log.warning("refused %s setting run %s to %s", login, run_id, one_line(kind, 40))
            return _error(403, "only Prefect's Cancel may change a run's state through the identity proxy")
        try:
            status, answer = await self.cancel(run_id, f"cancelled by {login} through the identity proxy")
        except NotFound as e:
            return _error(404, str(e))
        except ProviderUnavailable as e:
            return _error(502, str(e))
        log.info("%s cancelled run %s", login, run_id)
        return JSONResponse(answer, status_code=status)


def approval_routes(settings: ProxySettings, signing_key, **kw) -> list[Route]:
    """The routes `lifeboat serve` mounts for the identity proxy."""
    d = ProxiedDecisions(settings, signing_key, **kw)
    return [
        Route("/api/flow_runs/{id}/resume", d.resume_route, methods=["POST"]),
        Route("/api/flow_runs/{id}/set_state", d.cancel_route, methods=["POST"]),
        Route("/api/flow_runs/{id}/input/{key}", d.card_route, methods=["GET", "HEAD"]),
    ]
