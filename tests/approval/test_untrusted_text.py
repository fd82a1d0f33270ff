"""Text from outside kept safe: one line, capped, and inert in Markdown (the approval trail,
the run's summary artifact)."""

from markdown_it import MarkdownIt

from lifeboat_dr.core.approval import ApprovalProcess
from lifeboat_dr.kernel.text import markdown_text, one_line

from .conftest import T0, make_runbook

HOSTILE = (
    "# APPROVED\n[x](http://evil.example) ![i](http://evil.example/p.png) <b>hi</b> | cell \u202e\x1b[31m"
)
RENDER = MarkdownIt("commonmark").enable("table").render


def test_one_line_drops_controls_and_caps():
    assert one_line("a\nb\r\n\tc\x00d\u202ee", 100) == "a b c d e"
    assert one_line("x" * 50, 10) == "x" * 9 + "…"


def test_markdown_text_renders_as_exactly_its_characters():
    html = RENDER(markdown_text(HOSTILE, 500))
    assert "<h1>" not in html and "<a " not in html and "<img" not in html and "<b>" not in html
    assert "# APPROVED [x](http://evil.example)" in html and "&lt;b&gt;hi&lt;/b&gt;" in html


def test_the_trail_keeps_a_forged_approver_in_its_cell(tmp_path):
    process = ApprovalProcess.from_runbook(make_runbook(tmp_path).approval, T0)
    process.refuse(HOSTILE * 50, "refused: " + HOSTILE * 50, T0)
    html = RENDER(process.trail_markdown())
    assert html.count("<td>") == 8 and "<a " not in html and "<h1>" not in html
    assert len(process.trail[-1].who) <= 120 and len(process.trail[-1].why) <= 600


def test_the_runs_summary_renders_notes_as_text():
    from datetime import timedelta

    from lifeboat_dr.core.ledger import LedgerEntry
    from lifeboat_dr.core.timeline import entry_markdown

    entry = LedgerEntry(
        runbook="r",
        run_id="1",
        rto_target=timedelta(minutes=30),
        rpo_target=timedelta(minutes=30),
        notes={"approval": "rejected by " + HOSTILE},
    )
    html = RENDER(entry_markdown(entry))
    assert html.count("<h1>") == 1 and "<a " not in html and "<img" not in html
