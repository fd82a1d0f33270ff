"""What a re-run finds done: the ledger entry an earlier attempt of the run left, read back.

A failover or failback run is one run id: the Prefect flow run's id, which a run scheduled
again after its worker was lost (`lifeboat-failover-rerun`, a retry) keeps. The walker hands
each step's result to the ledger before any step after it starts, and a step that acts waits
for it to land first, so the entry holds every decision that anything done since rests on.
The re-run goes on in that entry (`RtoLedger(prior=...)`) and takes from it:

- certify: the checkpoint the run chose (`checkpoint`, `checkpoint_step`), never certified
  anew: a newer one is the resumed job's own, from which nothing proves parity;
- approval: the person's decision (and prestage, which only fed the card);
- resume: the resumed job's first step, for the resume attempt recorded (`attempt`);
- prove: a final loss-parity proof (passed, or not provable): the run is complete.

The other steps run again, idempotent where they act: confirm and plan only read, the fence
takes the run's own lease back (no second epoch bump), provision launches by the cluster's
name, and a resume whose record did not land keeps a job found running from the chosen
checkpoint (`ProviderSteps.resume`) instead of restarting it.
"""

from __future__ import annotations

from typing import Any

from lifeboat_dr.core.certify import Certified, CertifyReport
from lifeboat_dr.core.failover.contract import Resumed
from lifeboat_dr.core.ledger import LedgerEntry
from lifeboat_dr.core.resume import ParityOutcome, ParityResult
from lifeboat_dr.providers.chat.base import ApprovalDecision


def found_done(entry: LedgerEntry | None) -> dict[str, Any]:
    """step -> its result as the walker holds it, for each step `entry` holds done."""
    if entry is None:
        return {}
    done, phases, found = set(entry.done), entry.phases, {}
    chosen = checkpoint_of(entry)
    if "certify" in done and chosen is not None:
        found["certify"] = chosen
    if "approval" in done and "approval_granted" in phases:
        who = entry.notes.get("approval", "recorded before the re-run")
        found["approval"] = ApprovalDecision(approved=True, reason=who)
        found["prestage"] = None  # it only fed the card the person decided on
    if "resume" in done and "first_step" in phases and chosen is not None:
        first = phases["first_step"]
        found["resume"] = Resumed(
            phases.get("checkpoint_loaded", first), first, chosen.certified.step + 1, kept=True
        )
    if "prove" in done and entry.parity is not None:  # final: passed, or not provable and said so
        p = entry.parity
        found["prove"] = ParityResult(
            ParityOutcome(p.outcome), p.compared, p.detail, asked=p.asked, replayed_from=p.replayed_from
        )
    elif "prove" in done and "parity_passed" in phases:  # an entry from before the parity record
        found["prove"] = ParityResult(
            ParityOutcome.passed, 1, entry.notes.get("parity", "passed before the re-run"), asked=1
        )
    return found


def checkpoint_of(entry: LedgerEntry) -> CertifyReport | None:
    """The checkpoint the run chose, as certification reported it then; None when it chose none."""
    if entry.checkpoint is None or entry.checkpoint_step is None or entry.checkpoint_written_at is None:
        return None
    certified = Certified(
        entry.checkpoint_step, entry.checkpoint, entry.checkpoint_written_at, "recorded", {}
    )
    return CertifyReport(
        replica=entry.checkpoint.rsplit("/", 1)[0],
        source=None,
        at=entry.checkpoint_written_at,
        layout=None,
        mode="recorded",
        certified=certified,
        rejected=[],
        rpo=None,
        replication_lag=None,
        newest_source_step=None,
        source_error=None,
        calls={},
        object_bytes_read=0,
        metadata_bytes_read=0,
        notes=["the checkpoint this run chose before its re-run"],
    )


def summary(found: dict[str, Any]) -> str:
    """One line for the ledger: what the re-run found done."""
    parts = []
    for step in ("certify", "approval", "resume", "prove"):
        if step not in found:
            continue
        if step == "certify":
            parts.append(f"certify (step {found[step].certified.step}, not certified anew)")
        else:
            parts.append(step)
    return ", ".join(parts) or "nothing recorded done: every step runs again"
