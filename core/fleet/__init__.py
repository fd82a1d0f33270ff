"""Fleet-wide failover: one outage, many runbooks, one secondary's capacity arbitrated.

Plain functions over plain data (no Prefect, no SDKs): `plan` places the jobs of one outage on
the secondary's GPUs, `capacity` checks the declared quota against the seeds' 50% minimum.
"""
