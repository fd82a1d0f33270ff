"""An in-memory traffic router with the contract's rules, for tests and the sandbox. See base.py.

State is kept (weights, health, every applied change in `history`), so a test can ask what
traffic went where and when. `down(site)` makes the router's checks see a site down;
`unavailable = True` makes every call raise `ProviderUnavailable` like an unreachable API.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from lifeboat_dr.kernel.errors import ProviderUnavailable
from lifeboat_dr.providers.traffic.base import SiteHealth, check_weights


class FakeTraffic:
    def __init__(self, weights: Mapping[str, int]):
        check_weights(tuple(weights), weights, "fake router")
        self._weights = dict(weights)
        self._down: set[str] = set()
        self.history: list[dict[str, int]] = []  # every applied change, in order
        self.unavailable = False
        self._lock = threading.Lock()

    def sites(self) -> tuple[str, ...]:
        return tuple(self._weights)

    def weights(self) -> dict[str, int]:
        self._answer()
        with self._lock:
            return dict(self._weights)

    def set_weights(self, weights: Mapping[str, int]) -> None:
        self._answer()
        check_weights(self.sites(), weights, "fake router")
        with self._lock:
            self._weights.update(weights)
            self.history.append(dict(weights))

    def health(self) -> dict[str, SiteHealth]:
        self._answer()
        with self._lock:
            return {
                s: SiteHealth(s, w, "down" if s in self._down else "up", "fake check")
                for s, w in self._weights.items()
            }

    def down(self, site: str, is_down: bool = True) -> None:
        """The router's checks see `site` down (or up again)."""
        (self._down.add if is_down else self._down.discard)(site)

    def _answer(self) -> None:
        if self.unavailable:
            raise ProviderUnavailable("fake router: not answering")


__all__ = ["FakeTraffic"]
