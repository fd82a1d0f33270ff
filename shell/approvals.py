"""`POST /api/flow_runs/{id}/resume` behind the identity proxy: decisions from the Prefect UI
and `lifeboat approve`, each with the identity the proxy verified.

An open-source Prefect server knows no users (`PREFECT_SERVER_API_AUTH_STRING` is one shared
password), so the identity comes from a reverse proxy in front of it (SSO such as
oauth2-proxy, or HAProxy with a userlist: `deploy/haproxy/lifeboat.cfg`). The proxy sends
every resume of a run to this route instead of Prefect, with two headers it sets itself
after removing any a client sent: the login it authenticated (`X-Lifeboat-User`) and a
secret only it and `lifeboat serve` know (`X-Lifeboat-Proxy-Secret`, so nobody reaching
this port directly can name a user). The route signs the decision for that run with the
approval key (`lifeboat_dr.core.approval_proof`) and resumes the run through Prefect's API; the
flow checks the signature and the runbook's allow-list (`approval.logins`). The answer is
Prefect's own, so the UI and the Prefect client behave as if they had called Prefect.

Refusals change nothing: no or wrong proxy secret, or no identity → 401; a body over
`max_body` → 413 (before reading it); not JSON, bad UTF-8, not a run id, or no
`approved`/`reason` → 400; no such run → 404; Prefect down → 502.
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
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from lifeboat_dr.core.approval_proof import sign_decision
from lifeboat_dr.kernel.errors import ConfigError, NotFound, ProviderUnavailable
from lifeboat_dr.providers.chat.base import ApprovalDecision, Via

log = logging.getLogger("lifeboat.approvals")

Resume = Callable[[str, dict[str, Any]], Awaitable[tuple[int, dict[str, Any]]]]


class ProxySettings(BaseModel):
    """What the proxied resume route needs (`lifeboat serve` reads LIFEBOAT_PROXY_SECRET and
    LIFEBOAT_APPROVAL_KEY)."""

    proxy_secret: SecretStr = Field(
        description="Shared with the proxy only; proves a request came through it."
    )
    approval_key: SecretStr = Field(
        description="Signs decisions; the failover flow verifies with the same key."
    )
    identity_header: str = Field(
        "x-lifeboat-user", description="Header the proxy sets to the verified login."
    )
    secret_header: str = Field("x-lifeboat-proxy-secret", description="Header carrying the proxy secret.")
    max_body: int = Field(64 * 1024, description="Largest request body read, in bytes.")


async def _prefect_resume(run_id: str, run_input: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    from lifeboat_dr.providers.orchestrator.prefect_api import resume_run_answer

    return await resume_run_answer(run_id, run_input)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=status)


class ProxiedResume:
    def __init__(
        self,
        settings: ProxySettings,
        *,
        resume: Resume | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        if not settings.proxy_secret.get_secret_value() or not settings.approval_key.get_secret_value():
            raise ConfigError(
                "the proxied resume route needs LIFEBOAT_PROXY_SECRET and LIFEBOAT_APPROVAL_KEY"
            )
        self.settings, self.resume, self.clock = settings, resume or _prefect_resume, clock
        self._secret = settings.proxy_secret.get_secret_value().encode()
        self._key = settings.approval_key.get_secret_value().encode()

    def _identity(self, request: Request) -> str | None:
        presented = request.headers.get(self.settings.secret_header, "").encode("latin-1", "replace")
        if not hmac.compare_digest(presented, self._secret):
            return None
        login = request.headers.get(self.settings.identity_header, "").strip()
        return login if 0 < len(login) <= 256 and login.isprintable() else None

    async def _body(self, request: Request) -> bytes | None:
        """The body, or None once it passes `max_body` (declared or streamed)."""
        limit = self.settings.max_body
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return None
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                return None
        return body

    async def handle(self, request: Request) -> JSONResponse:
        login = self._identity(request)
        if login is None:
            log.warning("refused a resume that did not come through the identity proxy with a login")
            return _error(401, "Unauthorized: decisions are taken only through the identity proxy")
        try:
            body = await self._body(request)
        except ClientDisconnect:
            return _error(400, "the request body did not arrive")
        if body is None:
            return _error(413, f"request body over {self.settings.max_body} bytes")
        try:
            run_input = json.loads(body.decode("utf-8"))["run_input"]
            approved, reason = run_input["approved"], run_input["reason"]
            run_id = str(UUID(request.path_params["id"]))
        except (ValueError, KeyError, TypeError, RecursionError):
            return _error(400, 'expected {"run_input": {"approved": true|false, "reason": "…"}}')
        if not isinstance(approved, bool) or not isinstance(reason, str) or not reason.strip():
            return _error(400, "approved must be true or false and reason a non-empty text")
        via = Via.cli if request.headers.get("user-agent", "").startswith("prefect/") else Via.ui
        decision = ApprovalDecision(approved=approved, reason=reason[:2000], approver=login, via=via)
        signed = sign_decision(self._key, run_id, decision, self.clock())
        try:
            status, answer = await self.resume(run_id, signed)
        except NotFound as e:
            return _error(404, str(e))
        except ProviderUnavailable as e:
            return _error(502, str(e))
        log.info("%s %s run %s via %s", login, "approved" if approved else "rejected", run_id, via)
        return JSONResponse(answer, status_code=status)


def approval_routes(settings: ProxySettings, **kw) -> list[Route]:
    """The route `lifeboat serve` mounts for the identity proxy."""
    return [Route("/api/flow_runs/{id}/resume", ProxiedResume(settings, **kw).handle, methods=["POST"])]
