"""`lifeboat serve`: one web app for the outside world's callbacks.

Mounted when their credentials are present: `POST /alerts/alertmanager` (Alertmanager
webhooks: LIFEBOAT_ALERTMANAGER_TOKEN, or _USER and _PASSWORD, or --token-secret; one alert
group is one independent source for the quorum, LIFEBOAT_ALERTMANAGER_SOURCE_SCOPE=endpoint
makes the whole receiver one) and
`POST /slack/actions` (approval card clicks: SLACK_SIGNING_SECRET and SLACK_BOT_TOKEN) and
`POST /api/flow_runs/{id}/resume` and `/set_state` (decisions and Cancel from the Prefect UI
and `lifeboat approve` behind the identity proxy: LIFEBOAT_PROXY_SECRET; see
docs/approvals.md). Both sign each decision with the private key in
LIFEBOAT_APPROVAL_SIGNING_KEY_FILE (`lifeboat keys generate`); the flows verify with its
public key. Events and resumes go to PREFECT_API_URL. The signal log (LIFEBOAT_STATE_DIR,
default `.lifeboat/detect`) must be the one the watch flow writes. Every connection has a
deadline for its headers and its body, and their number is capped.
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
    p.add_argument(
        "--header-timeout", type=float, default=10.0, metavar="S", help="seconds for a request's headers"
    )
    p.add_argument(
        "--body-timeout", type=float, default=30.0, metavar="S", help="seconds for a request's body"
    )
    p.add_argument("--max-connections", type=int, default=2048, help="open connections at most")
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
        )
        mounted += slack_routes(slack, signing_key=_signing_key())
    if os.environ.get("LIFEBOAT_PROXY_SECRET"):
        from lifeboat_dr.shell.approvals import ProxySettings, approval_routes

        mounted += approval_routes(
            ProxySettings(proxy_secret=os.environ["LIFEBOAT_PROXY_SECRET"]), _signing_key()
        )
    if not mounted:
        raise ConfigError(
            "nothing to serve: the Alertmanager receiver needs credentials (LIFEBOAT_ALERTMANAGER_TOKEN, "
            "or LIFEBOAT_ALERTMANAGER_USER and _PASSWORD) and Slack actions need "
            "SLACK_SIGNING_SECRET and SLACK_BOT_TOKEN"
        )
    return mounted


def _signing_key():
    from lifeboat_dr.core.approval_keys import signing_key

    return signing_key()


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

    from lifeboat_dr.shell.server import Limits, create_app, server_config

    if min(args.header_timeout, args.body_timeout) <= 0 or args.max_connections < 1:
        raise ConfigError("--header-timeout and --body-timeout must be over 0, --max-connections at least 1")
    mounted = routes(args)
    limits = Limits(args.header_timeout, args.body_timeout, args.max_connections)
    print(
        f"lifeboat serve: {', '.join(r.path for r in mounted)} on http://{args.host}:{args.port} "
        f"(headers within {limits.header_s:g}s, bodies within {limits.body_s:g}s, "
        f"at most {limits.connections()} connections)",
        file=sys.stderr,
    )
    uvicorn.Server(server_config(create_app(mounted), args.host, args.port, limits, log_level="info")).run()
    return 0
