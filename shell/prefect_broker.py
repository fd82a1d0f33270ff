"""Prefect's in-memory message broker, with the actions service's consumer running more than
two messages at once: `PREFECT_MESSAGING_BROKER=lifeboat_dr.shell.prefect_broker` on a single
`prefect server start` (no Redis).

Prefect's memory Consumer handles two messages of a topic at a time. On the `actions` topic
each message is one automation action (the failover trigger's `run-deployment`), each an API
call of its own, so a region loss that confirms 200 outages at once creates their failover runs
two at a time. Here the `actions` topic's consumer runs `LIFEBOAT_ACTIONS_CONCURRENCY` (default
32) at once; every other topic (events for the triggers, the persister, the logs) keeps
Prefect's own, so nothing about their order changes. Prefect's actions handler is written for
concurrent messages (one orchestration client per action when CSRF is on) and skips an action
it has already run (`action_has_already_happened`), as it does at two.

Everything else is Prefect's module itself: the same topics, publishers, cache and
subscriptions. The setting is read when the consumer is made, in the server's process.
"""

from __future__ import annotations

import os
from typing import Any

from prefect.server.utilities.messaging import memory
from prefect.server.utilities.messaging.memory import Publisher, break_topic, ephemeral_subscription

__all__ = ["Consumer", "Publisher", "break_topic", "ephemeral_subscription", "actions_concurrency"]

ACTIONS_TOPIC = "actions"
DEFAULT_ACTIONS_CONCURRENCY = 32


def actions_concurrency() -> int:
    """`LIFEBOAT_ACTIONS_CONCURRENCY` (a positive integer), else 32."""
    raw = os.environ.get("LIFEBOAT_ACTIONS_CONCURRENCY", "").strip()
    if not raw:
        return DEFAULT_ACTIONS_CONCURRENCY
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"LIFEBOAT_ACTIONS_CONCURRENCY must be a positive integer, not {raw!r}")
    return int(raw)


class Consumer(memory.Consumer):
    """Prefect's memory Consumer; on the `actions` topic, unless a caller chose a concurrency,
    `actions_concurrency()` of them at once."""

    def __init__(self, topic: str, **kwargs: Any) -> None:
        if topic == ACTIONS_TOPIC and "concurrency" not in kwargs:
            kwargs["concurrency"] = actions_concurrency()
        super().__init__(topic, **kwargs)
