"""`lifeboat serve`: one web app for the outside world's callbacks.

Mounted when their credentials are present: `POST /alerts/alertmanager` (Alertmanager
webhooks: LIFEBOAT_ALERTMANAGER_TOKEN, or _USER and _PASSWORD, or --token-secret; one alert
group is one independent source for the quorum, LIFEBOAT_ALERTMANAGER_SOURCE_SCOPE=endpoint
makes the whole receiver one) and
`POST /slack/actions` (approval card clicks: SLACK_SIGNING_SECRET and SLACK_BOT_TOKEN) and
`POST /api/flow_runs/{id}/resume` (decisions from the Prefect UI and `lifeboat approve`
behind the identity proxy: LIFEBOAT_PROXY_SECRET; see docs/approvals.md). Both sign each
decision with LIFEBOAT_APPROVAL_KEY, which the failover flow verifies.
Events and resumes go to PREFECT_API_URL. The signal log (LIFEBOAT_STATE_DIR, default
`.lifeboat/detect`) must be the one the watch flow writes.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.shell.cli import COMMANDS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help=COMMANDS["serve"],
        description=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("runbooks", nargs="*", type=Path, help="Runbook files this server guards.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8900)
    p.add_argument("--default-runbook", help="Runbook name for alerts without a lifeboat_runbook label.")
    p.add_argument("--token-secret", help="Prefect Secret block holding the Alertmanager bearer token.")
    p.set_defaults(handler=serve)


def routes(args: argparse.Namespace) -> list:
    """Every route `lifeboat serve` exposes, in one list."""
    mounted = []
    alerts = _alert_settings(args)
    if alerts.bearer_token or (alerts.basic_username and alerts.basic_password):
        from lifeboat_dr.shell.alertmanager import alertmanager_routes

        mounted += alertmanager_routes(alerts)
    if os.environ.get("SLACK_SIGNING_SECRET") and os.environ.get("SLACK_BOT_TOKEN"):
        from lifeboat_dr.runbooks.loader import load_runbook
        from lifeboat_dr.shell.slack_actions import SlackSettings, slack_routes

        slack = SlackSettings.from_runbooks(
            [load_runbook(p) for p in args.runbooks],
            signing_secret=os.environ["SLACK_SIGNING_SECRET"],
            bot_token=os.environ["SLACK_BOT_TOKEN"],
            approval_key=_approval_key(),
        )
        mounted += slack_routes(slack)
    if os.environ.get("LIFEBOAT_PROXY_SECRET"):
        from lifeboat_dr.shell.approvals import ProxySettings, approval_routes

        mounted += approval_routes(
            ProxySettings(proxy_secret=os.environ["LIFEBOAT_PROXY_SECRET"], approval_key=_approval_key())
        )
    if not mounted:
        raise ConfigError(
            "nothing to serve: the Alertmanager receiver needs credentials (LIFEBOAT_ALERTMANAGER_TOKEN, "
            "or LIFEBOAT_ALERTMANAGER_USER and _PASSWORD) and Slack actions need "
            "SLACK_SIGNING_SECRET and SLACK_BOT_TOKEN"
        )
    return mounted


def _approval_key():
    from lifeboat_dr.providers.orchestrator.prefect_api import approval_key

    if (key := approval_key()) is None:
        raise ConfigError(
            "approvals need LIFEBOAT_APPROVAL_KEY (or the Prefect Secret block lifeboat-approval-key): "
            "the key the failover flow verifies decisions with"
        )
    return key.decode()


def _alert_settings(args: argparse.Namespace):
    from pydantic import ValidationError

    from lifeboat_dr.shell.alertmanager import AlertmanagerSettings

    extra = {}
    if args.token_secret:
        extra["bearer_token"] = AlertmanagerSettings.token_from_prefect_secret(args.token_secret)
    try:
        return AlertmanagerSettings.from_env(
            runbooks=args.runbooks, default_runbook=args.default_runbook, **extra
        )
    except ValidationError as e:
        err = e.errors()[0]
        raise ConfigError(f"Alertmanager receiver: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from lifeboat_dr.shell.server import create_app

    mounted = routes(args)
    print(
        f"lifeboat serve: {', '.join(r.path for r in mounted)} on http://{args.host}:{args.port}",
        file=sys.stderr,
    )
    uvicorn.run(create_app(mounted), host=args.host, port=args.port, log_level="info")
    return 0
