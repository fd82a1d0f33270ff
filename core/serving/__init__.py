"""Serving DR: verify a hot standby, move traffic to it, watch it, revert; batch progress."""
