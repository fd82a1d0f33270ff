"""A witness store (#27): the site state in a third place, decided by a majority of three.

Without one, the secondary's store must answer (every fence writes it). With a witness, every
fence writes a majority of the three stores and a view is conclusive when a majority answered:
a failback can fence, and a reader know the site state, while the secondary's store is down.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from lifeboat_dr.core.fencing import fence_job, read_lease
from lifeboat_dr.core.sitestate import read_site_state
from lifeboat_dr.kernel.errors import ProviderUnavailable, SiteStateUnknown
from lifeboat_dr.providers.storage.local import LocalStore


class Down:
    def __init__(self, inner):
        self.uri, self.capabilities = inner.uri, inner.capabilities

    def __getattr__(self, name):
        def down(*a, **k):
            raise ProviderUnavailable(f"{self.uri}: connection timed out")

        return down


@pytest.fixture
def stores(tmp_path):
    return LocalStore(tmp_path / "p"), LocalStore(tmp_path / "s"), LocalStore(tmp_path / "w")


def test_with_a_witness_the_site_state_is_known_while_the_secondarys_store_is_down(stores):
    primary, secondary, witness = stores
    fence_job(secondary, Down(primary), run_id="failover-1", holder="dr", witness=witness)

    state = read_site_state({"primary": primary, "secondary": Down(secondary), "witness": witness})
    assert (state.lineage, state.stale) == ("secondary@1", ("primary",))
    with pytest.raises(SiteStateUnknown, match="majority"):  # one store of three proves nothing
        read_site_state({"primary": Down(primary), "secondary": secondary, "witness": Down(witness)})


def test_with_a_witness_a_failback_fences_while_the_secondarys_store_is_down(stores):
    primary, secondary, witness = stores
    fence_job(secondary, primary, run_id="failover-1", holder="dr", witness=witness)

    lease, on_secondary = fence_job(
        primary,
        Down(secondary),
        run_id="failback-1",
        holder="home",
        active="primary",
        expect_epoch=1,
        witness=witness,
    )

    assert (lease.lineage, on_secondary) == ("primary@2", None)
    assert read_lease(witness)[0].lineage == "primary@2"
    state = read_site_state({"primary": primary, "secondary": Down(secondary), "witness": witness})
    assert state.lineage == "primary@2"


def test_a_fence_that_reaches_one_store_of_three_fences_nothing(stores):
    primary, secondary, witness = stores
    with pytest.raises(SiteStateUnknown, match="majority"):
        fence_job(secondary, Down(primary), run_id="failover-1", holder="dr", witness=Down(witness))
    assert read_lease(secondary) is None


RUNBOOK = """\
name: trainer
workload: finetuning
primary: {{infra: local, store: "file://{p}"}}
secondary: {{infra: local, store: "file://{s}", candidates: [{{infra: local}}]}}
witness: {{store: "file://{w}"}}
job: {{command: "python train.py"}}
checkpoint: {{layout: manifest, cadence: 5m, retention: {{keep_last: 2}}}}
"""


@pytest.mark.processes
def test_a_runbooks_witness_holds_its_named_site_state_after_a_replicate(tmp_path):
    from lifeboat_dr.core.commit import commit_checkpoint
    from lifeboat_dr.standins.checkpoints import write_checkpoint

    p, s, w = (tmp_path / n for n in ("p", "s", "w"))
    primary = LocalStore(p)
    commit_checkpoint(primary, write_checkpoint(primary, "manifest", 10), 10, 0)
    (tmp_path / "rb.yaml").write_text(RUNBOOK.format(p=p, s=s, w=w))

    for command in ("validate", "replicate"):
        run = subprocess.run(
            [sys.executable, "-m", "lifeboat_dr", command, "rb.yaml"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert run.returncode == 0, run.stdout + run.stderr
    assert read_lease(LocalStore(w))[0].runbook == "trainer"
