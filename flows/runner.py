"""`PrefectRunner`: the walker's steps as Prefect task runs (`lifeboat_dr.core.failover.walk.Runner`).

One task run per step, named after it, retried only on `ProviderUnavailable`. A step's handle
is done when its task run has ended. A step whose re-check finds another run holding the job
(`StandDown`) did nothing: its task run ends Cancelled, not Failed, and the walker gets the
`StandDown` back to stand the whole run down.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.states import Cancelled

from lifeboat_dr.core.failover import walk
from lifeboat_dr.kernel.errors import ProviderUnavailable, StandDown


def _retryable(task, task_run, state) -> bool:
    """Retry a step only on errors the provider says are transient."""
    try:
        state.result()
    except ProviderUnavailable:
        return True
    except BaseException:
        return False
    return False


@task(cache_policy=NO_CACHE, persist_result=False)
def _step(call, *args) -> walk.Timed:
    try:
        return walk.timed(call, *args)
    except StandDown as e:
        return Cancelled(message=f"stood down: {e}", data=e)  # `result()` raises it again


class PrefectRunner:
    """Each step one task run, with the runbook's retries (`failover.retries`, `retry_delay`)."""

    def __init__(self, retries: int, retry_delay_s: float):
        self.retries, self.retry_delay_s = retries, retry_delay_s
        self._tasks: dict[str, Any] = {}  # step -> its task variant, built once

    def _task(self, name: str):
        if name not in self._tasks:
            self._tasks[name] = _step.with_options(
                name=name,
                retries=self.retries,
                retry_delay_seconds=self.retry_delay_s,
                retry_condition_fn=_retryable,
            )
        return self._tasks[name]

    def start(self, name: str, call, *args: Any) -> _Handle:
        return _Handle(self._task(name).submit(call, *args))

    def result(self, handle: _Handle) -> walk.Timed:
        return handle.run.result()


class _Handle:
    def __init__(self, run):
        self.run = run  # the PrefectFuture
        self.future = run.wrapped_future  # done when the task run has ended
