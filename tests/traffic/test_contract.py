"""The traffic contract, run against every backend: the fake, HAProxy (runtime API, a real
haproxy on loopback) and Route 53 (moto's, through boto3)."""

import pytest

from lifeboat_dr.kernel.errors import ConfigError, NotFound, ProviderUnavailable
from lifeboat_dr.providers.traffic.base import MAX_WEIGHT, TrafficRouter, revert, switch


def test_router_names_its_sites_and_their_weights(router):
    assert isinstance(router, TrafficRouter)
    assert router.sites() == ("primary", "standby")
    assert router.weights() == {"primary": 255, "standby": 0}


def test_set_weights_changes_only_the_named_sites(router):
    router.set_weights({"standby": 40})
    assert router.weights() == {"primary": 255, "standby": 40}
    router.set_weights({"primary": 0, "standby": 255})
    assert router.weights() == {"primary": 0, "standby": 255}


def test_setting_the_same_weights_twice_changes_nothing_more(router):
    router.set_weights({"primary": 10, "standby": 20})
    router.set_weights({"primary": 10, "standby": 20})
    assert router.weights() == {"primary": 10, "standby": 20}


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"standby": 255, "elsewhere": 3}, NotFound),
        ({"standby": 255, "primary": MAX_WEIGHT + 1}, ConfigError),
        ({"standby": -1}, ConfigError),
        ({"standby": True}, ConfigError),
        ({"standby": "255"}, ConfigError),
    ],
)
def test_a_bad_request_is_refused_and_changes_nothing(router, bad, error):
    with pytest.raises(error):
        router.set_weights(bad)
    assert router.weights() == {"primary": 255, "standby": 0}


def test_switch_moves_all_traffic_and_revert_puts_it_back(router):
    before = switch(router, "standby")
    assert router.weights() == {"primary": 0, "standby": MAX_WEIGHT}
    revert(router, before)
    assert router.weights() == {"primary": 255, "standby": 0}


def test_switch_by_steps_shares_traffic_in_proportion(router):
    switch(router, "standby", 10)
    assert router.weights() == {"primary": 229, "standby": 25}
    switch(router, "standby", 50)
    assert router.weights() == {"primary": 127, "standby": 127}
    switch(router, "standby", 100)
    assert router.weights() == {"primary": 0, "standby": MAX_WEIGHT}


def test_health_reports_every_site_with_its_weight(router):
    switch(router, "standby", 50)
    health = router.health()
    assert set(health) == {"primary", "standby"}
    assert {s: h.weight for s, h in health.items()} == {"primary": 127, "standby": 127}
    assert all(h.state in ("up", "down", "unknown") for h in health.values())


def test_switching_to_an_unknown_site_is_refused(router):
    with pytest.raises(NotFound):
        switch(router, "elsewhere")
    assert router.weights() == {"primary": 255, "standby": 0}


def test_a_router_that_does_not_answer_is_retryable(unreachable):
    with pytest.raises(ProviderUnavailable):
        unreachable.weights()
    with pytest.raises(ProviderUnavailable):
        unreachable.set_weights({"standby": 255})
