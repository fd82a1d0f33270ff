"""Why GCS fencing is tested on the fake, not on the emulator.

gcp-storage-emulator ignores `ifGenerationMatch`: a create-only write over an existing
object succeeds, and so does an if-match on a stale generation. Real GCS answers 412 to
both, and `MemoryStore` does too, so that is where fencing's GCS behaviour is tested. If
this test starts failing, the emulator learned preconditions: race fencing on it instead.
"""

import pytest

from lifeboat_dr.core.fencing import LEASE_KEY
from lifeboat_dr.kernel.errors import PreconditionFailed
from lifeboat_dr.testing.memory_store import MemoryStore

pytestmark = pytest.mark.integration


def _lost_conditions(store) -> list[str]:
    """Which conditional lease writes that must lose went through anyway."""
    first = store.put(LEASE_KEY, b'{"epoch": 1}', if_none_match=True)
    store.put(LEASE_KEY, b'{"epoch": 1, "touched": true}', if_match=first.version)
    went_through = []
    for name, kw in (
        ("create-only over an existing lease", {"if_none_match": True}),
        ("if-match on a stale generation", {"if_match": first.version}),
    ):
        try:
            store.put(LEASE_KEY, b'{"epoch": 2}', **kw)
            went_through.append(name)
        except PreconditionFailed:
            pass
    return went_through


def test_gcs_emulator_ignores_generation_preconditions_so_fencing_uses_the_fake():
    from lifeboat_dr.providers.storage.gcs import GcsStore
    from lifeboat_dr.testing.emulators import gcs_emulator, new_gcs_bucket

    with gcs_emulator() as url:
        emulated = _lost_conditions(GcsStore(new_gcs_bucket(url), "jobs/llama", endpoint_url=url))
    assert emulated, "the emulator now honours ifGenerationMatch: race fencing on it too"
    assert _lost_conditions(MemoryStore()) == []  # the fake refuses both, as real GCS does
