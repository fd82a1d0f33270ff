"""Alertmanager webhook (version 4) payloads, and alerts as signal readings.

Routing is by label, so an alert rule decides what it means to Lifeboat:
`lifeboat_runbook=<name>` names the protected job (else the receiver's default runbook),
`lifeboat_signal=<signal>` says which independent signal it is evidence of (a DCGM XID
alert is `gpu_health`); without it an alert is the `alertmanager` signal. Several alerts of
one signal are still one vote.

Independence (`SourceScope`): by default one alert *group* is one source, however many
signals its alerts claim, so a single webhook cannot meet a quorum of 2 by itself.
`endpoint` makes everything that arrives through the webhook one source: a quorum then
needs a probe (heartbeat, NVML, control plane) too, so whoever holds the webhook token
cannot start a failover alone (they can invent group keys).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lifeboat_dr.core.detection.signals import Clock, Reading, Status, iso, utc_now

RUNBOOK_LABEL = "lifeboat_runbook"
SIGNAL_LABEL = "lifeboat_signal"
DEFAULT_SIGNAL = "alertmanager"

SourceScope = Literal["group", "endpoint"]


class Alert(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None  # "0001-01-01T00:00:00Z" while firing
    generatorURL: str = ""
    fingerprint: str = Field(min_length=1)

    @field_validator("startsAt", "endsAt")
    @classmethod
    def _in_utc(cls, t: datetime | None) -> datetime | None:
        """UTC from here on (no time zone: UTC); a time that leaves the calendar in UTC is refused."""
        if t is None:
            return t
        try:
            return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)
        except OverflowError:
            raise ValueError("time out of range once converted to UTC") from None


class AlertmanagerWebhook(BaseModel):
    """https://prometheus.io/docs/alerting/latest/configuration/#webhook_config"""

    model_config = ConfigDict(extra="allow")

    version: Literal["4"]
    groupKey: str
    truncatedAlerts: int = Field(0, ge=0)  # alerts Alertmanager left out (max_alerts)
    status: Literal["firing", "resolved"]
    receiver: str
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[Alert]


def alert_origin(group: AlertmanagerWebhook, scope: SourceScope) -> str:
    """The independent source an alert of `group` counts as (see the module docstring)."""
    return "alertmanager" if scope == "endpoint" else f"alertmanager-group:{group.groupKey}"


def alert_reading(
    alert: Alert, group: AlertmanagerWebhook, now: datetime, hold: timedelta, scope: SourceScope = "group"
) -> Reading:
    """A firing alert is a failing reading that stays live until resolved (at most `hold`,
    or its own future `endsAt`); a resolved one is an ok reading of the same source."""
    firing = alert.status == "firing"
    expires = None
    if firing:
        ends = alert.endsAt if alert.endsAt and alert.endsAt.year > 1 else None
        expires = ends if ends and ends > now else now + hold
    name = alert.labels.get("alertname", "alert")
    said = alert.annotations.get("summary") or alert.annotations.get("description") or ""
    return Reading(
        signal=alert.labels.get(SIGNAL_LABEL, DEFAULT_SIGNAL),
        source=f"alertmanager:{alert.fingerprint}",
        status=Status.failing if firing else Status.ok,
        at=now,
        summary=f"{name} {alert.status}" + (f": {said}" if said else ""),
        evidence={
            "alertname": name,
            "labels": dict(sorted(alert.labels.items())),
            "since": iso(alert.startsAt),
            "generator_url": alert.generatorURL,
            "group_key": group.groupKey,
            "fingerprint": alert.fingerprint,
            "truncated_alerts": group.truncatedAlerts,
        },
        expires=expires,
        origin=alert_origin(group, scope),
    )


def runbook_of(alert: Alert, group: AlertmanagerWebhook, default: str | None) -> str | None:
    return alert.labels.get(RUNBOOK_LABEL) or group.commonLabels.get(RUNBOOK_LABEL) or default


def dedupe_key(group: AlertmanagerWebhook, alert: Alert) -> str:
    """Alertmanager re-sends a group every group_interval: same key, same alert. A new
    `startsAt` is a new firing of the same alert, hence a new event."""
    return f"{group.groupKey}|{alert.fingerprint}|{alert.status}|{iso(alert.startsAt)}"


def alert_event_id(key: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"lifeboat:alert:{key}")


class Seen:
    """Remembers keys for `ttl` (bounded): `first(key)` is True once per key."""

    def __init__(self, ttl: timedelta = timedelta(hours=24), *, limit: int = 10_000, clock: Clock = utc_now):
        self.ttl, self.limit, self.clock = ttl, limit, clock
        self._seen: OrderedDict[str, datetime] = OrderedDict()

    def first(self, key: str) -> bool:
        now = self.clock()
        while self._seen and (
            len(self._seen) >= self.limit or now - next(iter(self._seen.values())) > self.ttl
        ):
            self._seen.popitem(last=False)
        if key in self._seen:
            return False
        self._seen[key] = now
        return True
