"""Is the standby fit to take traffic? Same model version, healthy, and a real answer in budget.

Plain functions over a `ModelEndpoint` (providers/serving/base.py). The expected version is
the digest of the *certified* weights (`lifeboat_dr.core.serving.digest.store_weights_digest` over the
newest certified checkpoint), never what the standby says about itself. A standby that does
not report a digest, or reports another, is refused: an unverifiable version is not verified.
"""

from __future__ import annotations

from dataclasses import dataclass

from lifeboat_dr.providers.serving.base import Answer, ModelEndpoint


@dataclass(frozen=True)
class StandbyCheck:
    """What the standby answered before the switch, and what was wrong with it."""

    url: str
    expected_digest: str
    served_digest: str | None  # as the standby reported it (None: it did not)
    health_latency_s: float | None
    canary_latency_s: float | None
    problems: tuple[str, ...]  # empty: verified

    @property
    def ok(self) -> bool:
        return not self.problems


def _judge(name: str, answer: Answer, budget_s: float) -> list[str]:
    if answer.status == 0:
        return [f"{name}: no answer ({answer.error})"]
    if not answer.ok:
        return [f"{name}: HTTP {answer.status}"]
    if answer.latency_s > budget_s:
        return [f"{name}: answered in {answer.latency_s * 1000:.0f} ms, budget {budget_s * 1000:.0f} ms"]
    return []


def _digest_of(answer: Answer) -> str | None:
    body = answer.body
    digest = body.get("digest") if isinstance(body, dict) else None
    return digest if isinstance(digest, str) else None


def verify_standby(
    endpoint: ModelEndpoint,
    expected_digest: str,
    *,
    budget_s: float,
    health_path: str = "/healthz",
    model_path: str = "/v1/model",
    canary_path: str = "/v1/infer",
    canary_body: dict | None = None,
) -> StandbyCheck:
    """Ask the standby for its health, its weights' digest and one canary answer."""
    problems: list[str] = []
    health = endpoint.get(health_path, timeout=budget_s)
    problems += _judge("health", health, budget_s)
    model = endpoint.get(model_path, timeout=budget_s)
    served = _digest_of(model) if model.ok else None
    if not model.ok:
        problems += _judge("model version", model, budget_s)
    elif served is None:
        problems.append(f"model version: {model_path} reports no digest; the version cannot be verified")
    elif served != expected_digest:
        problems.append(
            f"model version: standby serves {served[:19]}…, the certified weights are {expected_digest[:19]}…"
        )
    canary = endpoint.post(canary_path, canary_body or {"prompt": "lifeboat canary"}, timeout=budget_s)
    problems += _judge("canary", canary, budget_s)
    canary_digest = _digest_of(canary) if canary.ok else None
    if canary_digest is not None and canary_digest != expected_digest:
        problems.append("canary: answered by other weights than the certified ones")
    return StandbyCheck(
        url=endpoint.url,
        expected_digest=expected_digest,
        served_digest=served,
        health_latency_s=health.latency_s if health.status else None,
        canary_latency_s=canary.latency_s if canary.status else None,
        problems=tuple(problems),
    )
