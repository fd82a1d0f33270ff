"""The core: certification, replication and retention, fencing and the site state, the ledger,
the failover's step graph and walker, detection, approval policy, advice. Plain Python over
the provider interfaces: no Prefect, no cloud SDK at import."""
