"""`PREFECT_MESSAGING_BROKER=lifeboat_dr.shell.prefect_broker`: Prefect loads it as a broker,
its `actions` consumer really handles that many messages at once, and every other topic keeps
Prefect's two."""

from __future__ import annotations

import asyncio

import pytest
from prefect.server.utilities import messaging
from prefect.settings import PREFECT_MESSAGING_BROKER, temporary_settings

BROKER = "lifeboat_dr.shell.prefect_broker"


@pytest.fixture
def broker(monkeypatch):
    monkeypatch.delenv("LIFEBOAT_ACTIONS_CONCURRENCY", raising=False)
    with temporary_settings({PREFECT_MESSAGING_BROKER: BROKER}):
        yield monkeypatch


async def _most_at_once(topic: str, messages: int) -> int:
    """Publish `messages` on `topic` to a consumer Prefect's `create_consumer` made; returns
    how many of them its handler held at once (each holds until no more arrive)."""
    consumer = messaging.create_consumer(topic)
    held, most, done = 0, 0, 0
    arrived = asyncio.Event()

    async def handler(message) -> None:
        nonlocal held, most, done
        held += 1
        most = max(most, held)
        arrived.set()
        while True:  # hold while others keep arriving
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), 0.2)
            except TimeoutError:
                break
        held -= 1
        done += 1
        if done == messages:
            raise messaging.StopConsumer(ack=True)

    async with messaging.create_publisher(topic) as publisher:
        for i in range(messages):
            await publisher.publish_data(b"{}", {"n": str(i)})
    try:
        await asyncio.wait_for(consumer.run(handler), 30)
    finally:
        await consumer.cleanup()
    return most


def test_the_actions_consumer_runs_thirty_two_actions_at_once_by_default(broker):
    assert asyncio.run(_most_at_once("actions", 40)) == 32


def test_the_actions_concurrency_is_the_setting(broker):
    broker.setenv("LIFEBOAT_ACTIONS_CONCURRENCY", "5")
    assert asyncio.run(_most_at_once("actions", 12)) == 5


def test_every_other_topic_keeps_prefects_two(broker):
    assert asyncio.run(_most_at_once("events", 6)) == 2


def test_a_concurrency_that_is_not_a_positive_integer_is_refused(broker):
    broker.setenv("LIFEBOAT_ACTIONS_CONCURRENCY", "0")
    with pytest.raises(ValueError, match="LIFEBOAT_ACTIONS_CONCURRENCY"):
        messaging.create_consumer("actions")
