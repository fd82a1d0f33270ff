"""Replication of committed checkpoints between the sites' stores.

- `direction`: which way it goes (the site state), what it copies that way
  (`sources_to_replicate`), one pass outside Prefect, and a failback's hand-back;
- `copying`: the copy itself (`replicate_checkpoints`), with receipts and root pointers;
- `lag`: how far behind each replica landed (`LagRecord`, the `LagLog`).

What a store holds is core/checkpoints/inventory.py; retention on the standby is
core/retention.py. Callers import each name from its module."""
