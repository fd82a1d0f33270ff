"""Why GCS fencing is tested on the fake, not on the emulator.

gcp-storage-emulator ignores `ifGenerationMatch`: a create-only write over an existing
object succeeds, and so does an if-match on a stale generation. Real GCS answers 412 to
both, and `MemoryStore` does too, so that is where fencing's GCS behaviour is tested. If
this test starts failing, the emulator learned preconditions: race fencing on it instead.
"""

import pytest

pytestmark = pytest.mark.integration


def test_gcs_emulator_ignores_generation_preconditions_so_fencing_uses_the_fake():
    pytest.importorskip("gcp_storage_emulator")
    from gcp_storage_emulator.server import create_server
    from google.api_core.exceptions import PreconditionFailed
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    server = create_server("127.0.0.1", 0, in_memory=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{server._api._httpd.server_address[1]}"
        client = storage.Client(
            project="lifeboat", credentials=AnonymousCredentials(), client_options={"api_endpoint": url}
        )
        blob = client.create_bucket("lease-bucket").blob("_lifeboat/lease.json")
        blob.upload_from_string(b'{"epoch": 1}', if_generation_match=0)
        first = blob.generation
        ignored = []
        for body, generation in (
            (b'{"epoch": 2}', 0),
            (b'{"epoch": 3}', first - 1 if first > 1 else first + 99),
        ):
            try:
                blob.upload_from_string(body, if_generation_match=generation)
                ignored.append(generation)
            except PreconditionFailed:
                pass
        assert ignored, "the emulator now honours ifGenerationMatch: race fencing on it too"
        assert blob.download_as_bytes() != b'{"epoch": 1}'  # a losing writer overwrote the lease
    finally:
        server.stop()
