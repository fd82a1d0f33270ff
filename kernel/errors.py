"""Errors that steer a flow: retry, stop, or tell the user what to fix.

Flows decide by type, never by message: `ProviderUnavailable` is retried with backoff,
`NotFound` and `PreconditionFailed` are permanent, `StopFailover` aborts the failover.
"""


class LifeboatError(Exception):
    """Base of every error Lifeboat raises on purpose."""


class ConfigError(LifeboatError):
    """A user mistake in a runbook, a flag or a file: printed as one line, no traceback."""


class RefusedKey(ConfigError):
    """An object key no store will read or write: a `..` or `.` segment, a leading `/`, an
    empty segment, or (a `file://` store) a symlink leaving the store. Refused for that one
    object, in one line; never retried (a rerun finds the same key)."""


class ProviderUnavailable(LifeboatError):
    """The outside system did not answer, throttled us, or returned a 5xx: retryable."""


class NotFound(LifeboatError):
    """The object, bucket or cluster does not exist."""


class PreconditionFailed(LifeboatError):
    """A conditional write lost: the object exists (create-only) or changed (if-match)."""


class StopFailover(LifeboatError):
    """Continuing would be unsafe (no certified checkpoint, fenced out, rejected)."""


class StandDown(StopFailover):
    """Another failover of the same runbook holds it (or already completed it): this run
    changes nothing and ends, with the reason in the ledger."""


class WriteFailed(LifeboatError):
    """A local file Lifeboat must write (ledger, lag log) cannot be written: the message
    names the path and the reason, in one line."""


class ChecksumMismatch(LifeboatError):
    """Bytes differ from the CRC32C they must have; the object was not accepted (retryable)."""


class SiteStateUnknown(ProviderUnavailable):
    """A store that holds the site state did not answer, so the view is not conclusive:
    nothing was written or deleted. Retryable: the command exits 75 (EX_TEMPFAIL), and the
    next run (or the flow's retry) reads the site state again."""

    exit_code = 75
