"""The invariants today's code still violates, each with the case of issue #27 behind it.

The CI budget (test_budget.py) and the Hypothesis search (test_hypothesis.py) fail on any
violation *outside* this table; the scripted histories of test_regressions.py pin each
case. When a fix lands, remove its rows: the budget then holds the fix to them.
"""

KNOWN_27 = {
    "fenced-out-copied": "a store that does not answer read as 'no lease'; clocks that lie (seal by time)",
    "active-overwritten": "a copy in flight when the fence lands; an unanswering store read as 'no lease'",
    "certified-bad": "the zombie's commits counted by a seal by time (clock behind, control plane ahead)",
    "resumed-bad": "a failback resuming from the zombie's step (seal by time)",
    "newest-deleted": "retention keeping the zombie's replicas and deleting the active lineage's",
    "none-certifiable": "retention keeping the zombie's replicas and deleting the active lineage's",
    "in-use-deleted": "retention planned before the fence; 'in use by a failover' read from the wrong ledger",
    "restarted": "a re-run with its run id re-certifies the job's own newer checkpoint and restarts it",
    "torn-down": "a re-run tearing down the healthy recovered job",
    "ledger-negative-rpo": "RPO from one machine's clock against another's, negative and recorded as 0",
    "ledger-missed": "a re-run's entry replacing its first attempt's; a fence that landed in a step that failed",
    "ledger-checkpoint": "a re-run's entry replacing its first attempt's (its job's checkpoint forgotten)",
    "commit-landed-stopped": "a lost reply to the commit marker's PUT stops the trainer",
    "bare-error": "ENOSPC at the fence: a bare OSError",
}
