"""The traffic interface: how much of a service's traffic each site gets, and moving it.

A `TrafficRouter` fronts one service served from several sites (an HAProxy backend whose
servers are the sites, a Route 53 weighted record set with one record per site). It has
three primitives; switching and reverting are written once on top of them:

- `weights()`: the current weight of every site it routes to;
- `set_weights(weights)`: change some sites' weights in one request (HAProxy: one runtime
  API line, Route 53: one change batch), validated first so a bad request changes nothing;
- `health()`: what the router itself knows of each site (its checks), never raising for a
  down site: a down site is an answer.

Weights are integers 0..MAX_WEIGHT (Route 53 allows 0..255, HAProxy 0..256); a site with
weight 0 gets no new traffic. Errors: an unknown site raises `NotFound`, a weight out of
range `ConfigError`, an unreachable router `ProviderUnavailable` (retryable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from lifeboat_dr.kernel.errors import ConfigError, NotFound

MAX_WEIGHT = 255

SiteState = Literal["up", "down", "unknown"]


@dataclass(frozen=True)
class SiteHealth:
    """The router's view of one site."""

    site: str
    weight: int  # as routed now
    state: SiteState  # up/down by the router's checks; unknown when it runs none
    detail: str = ""  # the router's own words, e.g. "L4CON" or "health check Failure"


@runtime_checkable
class TrafficRouter(Protocol):
    """One service's traffic split across named sites."""

    def sites(self) -> tuple[str, ...]:
        """The sites this router routes to, in a stable order."""
        ...

    def weights(self) -> dict[str, int]:
        """Current weight per site. Raises `ProviderUnavailable`."""
        ...

    def set_weights(self, weights: Mapping[str, int]) -> None:
        """Set the given sites' weights in one request; sites not named keep theirs.

        Raises `NotFound` (unknown site) or `ConfigError` (weight out of range) before
        changing anything, `ProviderUnavailable` when the router does not answer."""
        ...

    def health(self) -> dict[str, SiteHealth]:
        """The router's view of every site. Raises only `ProviderUnavailable`."""
        ...


def check_weights(known: tuple[str, ...], weights: Mapping[str, int], where: str) -> None:
    """Refuse a weight change naming an unknown site or a weight out of range."""
    for site, weight in weights.items():
        if site not in known:
            raise NotFound(f"{where}: no site {site!r}; sites are {', '.join(known)}")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= MAX_WEIGHT:
            raise ConfigError(f"{where}: weight {weight!r} for {site!r} is not an integer 0..{MAX_WEIGHT}")


def shift_weights(current: Mapping[str, int], to: str, percent: int) -> dict[str, int]:
    """The weights that send `percent`% of traffic to `to` and the rest to the other sites
    that had traffic, in their old proportions (all of them equally if none had any)."""
    if to not in current:
        raise NotFound(f"no site {to!r}; sites are {', '.join(current)}")
    if not 0 <= percent <= 100:
        raise ConfigError(f"share {percent!r} is not a percentage 0..100")
    others = {s: w for s, w in current.items() if s != to}
    if not others or percent == 100:
        return {to: MAX_WEIGHT, **dict.fromkeys(others, 0)}
    total = sum(others.values()) or len(others)
    rest = MAX_WEIGHT * (100 - percent) // 100
    out = {s: (w if sum(others.values()) else 1) * rest // total for s, w in others.items()}
    out[to] = MAX_WEIGHT * percent // 100
    return out


def switch(router: TrafficRouter, to: str, percent: int = 100) -> dict[str, int]:
    """Send `percent`% of traffic to site `to`. Returns the weights before, for `revert`."""
    before = router.weights()
    router.set_weights(shift_weights(before, to, percent))
    return before


def revert(router: TrafficRouter, before: Mapping[str, int]) -> None:
    """Put the weights back as `switch` found them."""
    router.set_weights(dict(before))
