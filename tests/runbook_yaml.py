"""The two-site runbook the tests write: one job, a primary and a secondary site on this machine
(`infra: local`, the secondary's one candidate local too), each test naming only what it is about."""

from __future__ import annotations

import yaml


def two_site_runbook(
    name: str,
    *,
    primary: str | dict = "file://primary",
    secondary: str | dict = "file://secondary",
    workload: str = "finetuning",
    job: str = "python train.py",
    checkpoint: dict | None = None,
    **sections: object,
) -> str:
    """The runbook's YAML. `primary` / `secondary`: the site's store URI, or its fields over
    `infra: local` (`{"store": ..., "endpoint_url": ...}`, another `infra`). `job`: its command.
    `checkpoint`: its fields over `cadence: 10m`. `sections`: any other top-level section as
    written (`targets={"rpo": "30m"}`, `detection={...}`)."""

    def site(given: str | dict, **base: object) -> dict:
        return {"infra": "local", **base, **({"store": given} if isinstance(given, str) else given)}

    doc = {
        "name": name,
        "workload": workload,
        "primary": site(primary),
        "secondary": site(secondary, candidates=[{"infra": "local"}]),
        "job": {"command": job},
        "checkpoint": {"cadence": "10m", **(checkpoint or {})},
        **sections,
    }
    return yaml.safe_dump(doc, sort_keys=False)
