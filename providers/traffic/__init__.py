"""Traffic routers: which site serves a service's requests (HAProxy, Route 53, fake)."""

from lifeboat_dr.providers.traffic.base import MAX_WEIGHT, SiteHealth, TrafficRouter, revert, switch

__all__ = ["MAX_WEIGHT", "SiteHealth", "TrafficRouter", "revert", "switch"]
