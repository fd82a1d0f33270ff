"""`lifeboat serve`: the web app for Alertmanager webhooks (and, later, Slack actions)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="Receive Alertmanager webhooks (POST /alerts/alertmanager).",
        description="Run the receiver. Credentials come from LIFEBOAT_ALERTMANAGER_TOKEN "
        "(or _USER/_PASSWORD) or --token-secret; events go to PREFECT_API_URL.",
    )
    p.add_argument("runbooks", nargs="*", type=Path, help="Runbook files whose alerts this receiver takes.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8900)
    p.add_argument("--default-runbook", help="Runbook name for alerts without a lifeboat_runbook label.")
    p.add_argument("--token-secret", help="Prefect Secret block holding the bearer token.")
    p.set_defaults(handler=serve)


def routes(args: argparse.Namespace) -> list:
    """Every route `lifeboat serve` exposes, in one list."""
    from providers.alerts.alertmanager import AlertmanagerSettings, alertmanager_routes

    extra = {}
    if args.token_secret:
        extra["bearer_token"] = AlertmanagerSettings.token_from_prefect_secret(args.token_secret)
    alerts = AlertmanagerSettings.from_env(
        runbooks=args.runbooks, default_runbook=args.default_runbook, **extra
    )
    return [
        *alertmanager_routes(alerts),
        # *slack_routes(...),  # approval (Slack interactivity) joins here
    ]


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from lifeboat.server import create_app

    uvicorn.run(create_app(routes(args)), host=args.host, port=args.port, log_level="info")
    return 0
