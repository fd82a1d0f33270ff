"""The console chat: prints the card; for the embedded default, demos and CI. See base.py.

`mode` says who answers: `wait` (print only; decide in the Prefect UI or with `lifeboat
approve`), `approve` / `reject` (answer at once as the configured approver, for dry runs),
or `ask` (prompt on the terminal when there is one, otherwise wait).
"""

from __future__ import annotations

import itertools
import sys
from typing import Literal, TextIO

from lifeboat_dr.providers.chat.base import ApprovalCard, ApprovalDecision, CardRef, Via

Mode = Literal["wait", "approve", "reject", "ask"]


class ConsoleChat:
    def __init__(
        self,
        mode: Mode = "wait",
        *,
        approver: str = "console",
        out: TextIO | None = None,
        inp: TextIO | None = None,
    ):
        self.mode, self.approver = mode, approver
        self.out, self.inp = out, inp
        self._ids = itertools.count(1)

    def _print(self, text: str) -> None:
        print(text, file=self.out or sys.stdout, flush=True)

    def post_card(self, card: ApprovalCard) -> CardRef:
        ref = CardRef(card.channel or "console", str(next(self._ids)))
        width = max(len(label) for label, _ in card.facts())
        drill = "DRILL: " if card.drill else ""
        lines = [f"== {drill}Approve {card.what} of {card.runbook}? (run {card.run_id}) =="]
        lines += [f"  {label:<{width}}  {value}" for label, value in card.facts()]
        if card.approvers:
            lines.append(f"  {'Approvers':<{width}}  {', '.join(card.approvers)}")
        if card.run_url:
            lines.append(f"  decide in the Prefect UI: {card.run_url}")
        lines.append(f"  decide with: lifeboat approve {card.run_id} [--reject] --reason '…'")
        self._print("\n".join(lines))
        return ref

    def update_card(self, ref: CardRef, card: ApprovalCard, outcome: str) -> None:
        self._print(f"== {card.runbook} (run {card.run_id}): {outcome}")

    def post(self, channel: str, text: str, thread: CardRef | None = None) -> None:
        self._print(text)

    def ephemeral(self, channel: str, user: str, text: str) -> None:
        self._print(f"(to {user}) {text}")

    def answer(self, card: ApprovalCard) -> ApprovalDecision | None:
        if self.mode in ("approve", "reject"):
            return ApprovalDecision(
                approved=self.mode == "approve",
                reason=f"console backend configured to {self.mode}",
                approver=self.approver,
                via=Via.console,
            )
        inp = self.inp or sys.stdin
        if self.mode == "ask" and (self.inp is not None or inp.isatty()):
            self._print("Approve? [y/N] ")
            yes = inp.readline().strip().lower() in ("y", "yes")
            self._print("Reason: ")
            reason = inp.readline().strip() or ("approved" if yes else "rejected") + " at the console"
            return ApprovalDecision(approved=yes, reason=reason, approver=self.approver, via=Via.console)
        return None
