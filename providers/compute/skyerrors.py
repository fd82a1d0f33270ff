"""What a SkyPilot launch error means for the failover: try the next candidate, or stop.

A table by exception class name (SkyPilot 0.14.1's `sky.exceptions`), matched along the
class's MRO so subclasses inherit their parent's verdict, and read without importing `sky`:

- `next`: this place cannot take the job now (no capacity, quota, a cloud API error, that
  cloud's credentials or prechecks). Another candidate, often another cloud, may:
  `CapacityError`, which `launch_with_fallback` moves past.
- `retry`: SkyPilot's API server is unreachable or busy: `ProviderUnavailable` (the step's
  retries apply; the same candidate is tried again).
- `stop`: the task itself is wrong (a mismatch, an unsupported feature, a bad storage spec,
  a rejected policy): every candidate would fail the same way. `StopFailover`.

Anything unknown stops too: a failover that moves on past an error it does not understand
would spend the fallback budget launching the same broken task everywhere. A
`ResourcesUnavailableError` with `no_failover=True` is SkyPilot saying "not worth trying
elsewhere" (e.g. the resources cannot be satisfied at all): stop.
"""

from __future__ import annotations

from typing import Literal

from lifeboat_dr.kernel.errors import LifeboatError, ProviderUnavailable, StopFailover
from lifeboat_dr.providers.compute.base import CapacityError

NextMove = Literal["next", "retry", "stop"]

LAUNCH_ERRORS: dict[str, NextMove] = {
    "ResourcesUnavailableError": "next",  # no capacity, quota exceeded, zone exhausted
    "KubeAPIUnreachableError": "next",
    "CloudError": "next",  # the cloud's API answered with an error in this region
    "ProvisionPrechecksError": "next",  # e.g. this cloud is not enabled / no credentials
    "InvalidCloudCredentials": "next",
    "CloudUserIdentityError": "next",
    "NoCloudAccessError": "next",
    "InvalidCloudConfigs": "next",
    "AWSAzFetchingError": "next",
    "FetchClusterInfoError": "next",
    "ClusterSetUpError": "next",
    "ProvisionUnsupportedError": "next",
    "ApiServerConnectionError": "retry",
    "ServerTemporarilyUnavailableError": "retry",
    "NetworkError": "retry",
    "ConnectionError": "retry",
    "TimeoutError": "retry",
    "ResourcesMismatchError": "stop",
    "NotSupportedError": "stop",
    "StorageError": "stop",
    "StorageSpecError": "stop",
    "InvalidSkyPilotConfigError": "stop",
    "InvalidClusterNameError": "stop",
    "UserRequestRejectedByPolicy": "stop",
    "ClusterOwnerIdentityMismatchError": "stop",
    "PermissionDeniedError": "stop",
    "ApiServerAuthenticationError": "stop",
    "APIVersionMismatchError": "stop",
    "ValueError": "stop",
}


def classify(error: BaseException) -> NextMove:
    """The verdict for `error`, by the nearest class in its MRO that the table names."""
    if getattr(error, "no_failover", False):
        return "stop"
    for cls in type(error).__mro__:
        if cls.__name__ in LAUNCH_ERRORS:
            return LAUNCH_ERRORS[cls.__name__]
    return "stop"


def launch_error(infra: str, error: BaseException) -> LifeboatError:
    """Lifeboat's error for a failed launch on `infra`: CapacityError (next candidate),
    ProviderUnavailable (retry) or StopFailover (stop), naming the SkyPilot error."""
    if isinstance(error, LifeboatError):
        return error
    text = str(error).strip().splitlines()
    what = f"{type(error).__name__}: {text[0] if text else 'no detail'}"
    verdict = classify(error)
    if verdict == "next":
        return CapacityError(f"{infra}: {what}")
    if verdict == "retry":
        return ProviderUnavailable(f"SkyPilot API server unreachable launching on {infra}: {what}")
    return StopFailover(f"SkyPilot refused the task on {infra} (every candidate would too): {what}")
