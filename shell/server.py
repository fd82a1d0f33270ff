"""`lifeboat serve`: one small Starlette app for the outside world's callbacks.

Routes come from the providers that own each protocol: Alertmanager webhooks
(`POST /alerts/alertmanager`) and Slack interactivity (`POST /slack/actions`).
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route


async def _healthz(request):
    return PlainTextResponse("ok")


def create_app(routes: list[Route] | None = None) -> Starlette:
    """The app with the health check plus the given provider routes."""
    return Starlette(routes=[Route("/healthz", _healthz), *(routes or [])])
