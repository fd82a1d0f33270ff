"""The failover in the core: its step graph (`graph`), the steps over providers (`steps`),
the walker (`walk`), the approval card (`card`) and the rollback policy (`rollback`).
No Prefect, no cloud SDK: the `failover` flow maps the walker's steps to task runs."""
