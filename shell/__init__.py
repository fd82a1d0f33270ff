"""The shell: the `lifeboat` command and `lifeboat serve`'s web endpoints.

It sits on top of everything (kernel ← runbooks ← providers ← core ← flows ← shell) and
holds no domain logic: each command parses its arguments, calls the core or a flow, and
prints; each endpoint checks its caller, parses the request and hands on.
"""
