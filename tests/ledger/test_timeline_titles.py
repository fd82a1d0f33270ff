"""The timeline picture says what ran (a failback is a failback) and its title fits inside the
picture: a run id is 36 characters and a runbook name may be 63, so a title on one line ran
off the right edge (measured as matplotlib draws it, in pixels)."""

from datetime import timedelta

import pytest

from lifeboat_dr.core.ledger import RtoLedger
from lifeboat_dr.core.timeline import entry_markdown, overflow, timeline_figure

from .conftest import replay_failover

RUN_ID = "1b71ea73-3b35-40a6-9be7-64f945c589fe"  # a Prefect flow run id, as the flows record


def entry(clock, *, runbook="demo", kind=None, drill=False):
    ledger = RtoLedger(
        runbook,
        RUN_ID,
        rto_target=timedelta(minutes=15),
        rpo_target=timedelta(minutes=30),
        clock=clock,
        kind=kind,
        drill=drill,
    )
    return replay_failover(ledger, clock)


@pytest.mark.parametrize(
    "runbook, kind, drill",
    [
        ("demo", "failback", False),
        ("demo", None, True),
        ("llama-70b-pretrain-us-east-1-to-us-central1-with-a-long-name-63", "failback", True),
    ],
)
def test_no_text_in_the_picture_runs_off_its_edges(clock, runbook, kind, drill):
    import matplotlib.pyplot as plt

    fig = timeline_figure(entry(clock, runbook=runbook, kind=kind, drill=drill))
    try:
        ax = fig.axes[0]
        texts = [ax.title, ax.xaxis.label, *ax.get_yticklabels()]
        outside = {t.get_text(): round(overflow(fig, t), 1) for t in texts if overflow(fig, t) > 0}
        assert not outside, f"pixels past the {fig.bbox.width:.0f}px-wide picture: {outside}"
    finally:
        plt.close(fig)


def test_a_failback_is_named_failback_in_its_picture_and_its_summary(clock):
    import matplotlib.pyplot as plt

    back = entry(clock, kind="failback")
    fig = timeline_figure(back)
    try:
        ax = fig.axes[0]
        assert ax.title.get_text().startswith(f"demo failback {RUN_ID} (")
        assert ax.get_xlabel() == "seconds since the failback was asked for"
    finally:
        plt.close(fig)
    assert entry_markdown(back).startswith(f"# Failback `demo` — run `{RUN_ID}`")
    drill = entry(clock, kind="failback", drill=True)
    assert entry_markdown(drill).startswith(f"# Failback drill `demo` — run `{RUN_ID}`")
