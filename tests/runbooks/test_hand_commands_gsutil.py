"""The rendered runbook's by-hand GCS commands, pasted into the real `gsutil` (PyPI's, in the
test extras; gcloud is not pip-installable) against fake-gcs-server on loopback: the
secondary's listing, a shard's size and CRC32C, the manifest it is compared with, and the
pre-failure loss log the parity check reads, all from the secondary (GCS) while the primary
(S3) is down. gsutil speaks only https, so the emulator serves its own self-signed TLS, and a
boto config points gsutil's JSON API at it (`gs_json_host`/`gs_json_port`)."""

from __future__ import annotations

import base64
import json
import re
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lifeboat_dr.core.checkpoints.manifest import Manifest, Shard
from lifeboat_dr.kernel.crc32c import crc32c
from lifeboat_dr.runbooks.loader import load_runbook
from lifeboat_dr.testing.emulators import fake_gcs_server
from tests.peers import needs

ROOT = Path(__file__).resolve().parents[2]
GSUTIL = Path(sys.executable).parent / "gsutil"
RUNBOOK = "llama-70b-pretrain"  # primary S3, secondary GCS, its loss log in the primary store

pytestmark = [
    pytest.mark.integration,
    pytest.mark.processes,
    needs(None if GSUTIL.exists() else f"no {GSUTIL}: pip install -e '.[test]' installs gsutil"),
]


def _section(title: str) -> str:
    text = (ROOT / "runbooks" / f"{RUNBOOK}.md").read_text()
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _gsutil_commands(text: str) -> list[list[str]]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [shlex.split(c) for c in re.findall(r"`([^`]+)`", prose) if c.startswith("gsutil ")]


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """(run, folder): `run(argv)` runs a pasted gsutil command in `folder` against the emulator."""
    folder = tmp_path_factory.mktemp("gsutil")
    with fake_gcs_server(scheme="https") as url:
        port = url.rsplit(":", 1)[1]
        boto = folder / "boto.cfg"
        boto.write_text(
            f"[Credentials]\ngs_json_host = 127.0.0.1\ngs_json_port = {port}\n"
            "[Boto]\nhttps_validate_certificates = False\nnum_retries = 1\n"
            "[GSUtil]\ndefault_project_id = lifeboat\n"
        )

        def run(argv: list[str]) -> subprocess.CompletedProcess:
            assert argv[0] == "gsutil", argv
            env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "BOTO_CONFIG": str(boto)}
            done = subprocess.run(
                [str(GSUTIL), *argv[1:]], cwd=folder, env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, (argv, done.stderr[-2000:])
            return done

        yield run, folder


def _bucket(run, uri: str) -> None:
    bucket = "/".join(uri.split("/")[:3])
    if bucket + "/" not in run(["gsutil", "ls"]).stdout.split():
        run(["gsutil", "mb", bucket])


def _put(run, folder: Path, uri: str, data: bytes) -> None:
    (folder / "upload.bin").write_bytes(data)
    run(["gsutil", "cp", "upload.bin", uri])


def test_the_hand_certify_lists_and_checksums_the_gcs_secondary_and_matches_its_manifest(gcs):
    run, folder = gcs
    rb = load_runbook(ROOT / "runbooks" / f"{RUNBOOK}.yaml")
    secondary = rb.secondary.store.rstrip("/")
    commands = _gsutil_commands(_section("2. Certify"))
    (ls,) = [c for c in commands if c[1] == "ls"]
    (stat,) = [c for c in commands if c[1] == "stat"]
    (manifest_cp,) = [c for c in commands if c[1] == "cp" and c[-1] == "manifest.json"]
    (shard_cp,) = [c for c in commands if c[1] == "cp" and c[-1] == "shard.bin"]
    assert all(secondary in " ".join(c) for c in (ls, stat, manifest_cp, shard_cp))  # never the primary
    _bucket(run, secondary)
    shard = b"\x00lifeboat-weights\xff" * 4096
    _put(run, folder, f"{secondary}/step-120000/model-00001.safetensors", shard)
    manifest = Manifest(
        120000, datetime.now(UTC), (Shard("model-00001.safetensors", len(shard), crc32c(shard)),)
    )
    _put(run, folder, f"{secondary}/step-120000/lifeboat-manifest.json", manifest.to_json())

    listing = run(ls).stdout
    assert f"{len(shard)}  " in listing and f"{secondary}/step-120000/model-00001.safetensors" in listing

    shown = run([a.replace("CHECKPOINT/SHARD", "step-120000/model-00001.safetensors") for a in stat]).stdout
    size = int(re.search(r"Content-Length:\s+(\d+)", shown).group(1))
    crc_b64 = re.search(r"Hash \(crc32c\):\s+(\S+)", shown).group(1)
    assert (size, base64.b64decode(crc_b64)) == (len(shard), crc32c(shard).to_bytes(4, "big"))

    run([a.replace("CHECKPOINT", "step-120000") for a in manifest_cp])
    (listed,) = json.loads((folder / "manifest.json").read_text())["shards"]
    hex_of = shlex.split(
        re.search(r"`(python -c 'import base64[^`]+) BASE64`", _section("2. Certify")).group(1)
    )
    as_hex = subprocess.run([sys.executable, *hex_of[1:], crc_b64], capture_output=True, text=True).stdout
    assert (listed["size"], listed["crc32c"]) == (size, as_hex.strip())  # the shard certifies by hand

    run([a.replace("CHECKPOINT/SHARD", "step-120000/model-00001.safetensors") for a in shard_cp])
    assert (folder / "shard.bin").read_bytes() == shard


def test_the_hand_parity_fetches_the_secondarys_copy_with_gsutil_and_never_passes_a_nan(gcs):
    run, folder = gcs
    rb = load_runbook(ROOT / "runbooks" / f"{RUNBOOK}.yaml")
    text = _section("8. Verify")
    (fetch,) = _gsutil_commands(text)
    assert fetch[:2] == ["gsutil", "cp"] and fetch[-1] == "pre.jsonl"
    assert fetch[2].startswith(rb.secondary.store.rstrip("/") + "/")  # the replica, not the dead primary's
    (parity,) = re.findall(r"`(python -c [^`]+)`", text)
    _bucket(run, fetch[2])
    n = rb.verify.parity_steps

    def check(pre: list[float], resumed: list[float]) -> int:
        lines = [json.dumps({"step": 100 + i, "loss": x}) for i, x in enumerate(pre)]
        _put(run, folder, fetch[2], "\n".join(lines).encode())
        (folder / "pre.jsonl").unlink(missing_ok=True)
        run(fetch)
        (folder / "resumed.jsonl").write_text(
            "\n".join(json.dumps({"step": 100 + i, "loss": x}) for i, x in enumerate(resumed))
        )
        argv = shlex.split(parity)
        return subprocess.run([sys.executable, *argv[1:]], cwd=folder, capture_output=True).returncode

    same = [2.0 + i / 100 for i in range(n)]
    assert check(same, same) == 0
    assert check([*same[:-1], float("nan")], [x * 99 for x in same]) == 1
    assert check(same[:1], same) == 1  # 1 of n steps compared is not a pass
