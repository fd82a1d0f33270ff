"""A region goes and every runbook in it alerts at once: through `lifeboat serve` and the
prefect.yaml automation on Prefect with PostgreSQL, each runbook's failover is created exactly
once, though every alert group arrives twice (both replicas of an HA Alertmanager send it).
The 200-runbook figure beside a bare Prefect client is benchmarks/alert_storm.py's."""

from __future__ import annotations

import pytest

from benchmarks.alert_storm import storm

pytestmark = [pytest.mark.processes, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def prefect_on_postgres(postgres_url):
    """This file's own `prefect server start`, on a database of its own in the suite's cluster."""
    from lifeboat_dr.testing.prefect_servers import postgres_database, prefect_server

    with prefect_server(postgres_database(postgres_url, "alert_storm")) as url:
        yield url


def test_twenty_runbooks_alerting_at_once_twice_each_get_one_failover_each(prefect_on_postgres):
    result = storm(prefect_on_postgres, 20)

    assert result.lost == 0 and result.attempts["200"] == 80, result.attempts
    storm_runs = {n: c for n, c in result.runs.items() if n.startswith("storm-")}
    assert storm_runs == {f"storm-{i:03d}": 1 for i in range(20)}
    assert result.runs["warm-up"] == 1
    assert len(result.alert_latency) == 20
