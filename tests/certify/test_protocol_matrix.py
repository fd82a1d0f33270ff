"""Layout x fault, through the real `lifeboat replicate` and `lifeboat certify` on local stores:
a crash mid-save is never replicated nor certified, one bad step never hides an older good
one, a missing shard and bit rot (no --deep) are caught."""

from __future__ import annotations

import json
import os

import pytest

from lifeboat_dr.providers.storage.local import LocalStore
from lifeboat_dr.shell.cli import main
from lifeboat_dr.standins.checkpoints import dcp_metadata, replicate, shard_bytes, write_checkpoint
from tests.runbook_yaml import two_site_runbook

LAYOUTS = ["dcp", "deepspeed", "megatron", "megatron-torch_dist", "hf", "hf-weights", "manifest"]
SHARD = {  # a data file of step 200, per layout
    "dcp": "step_0000200/__0_0.distcp",
    "deepspeed": "global_step200/zero_pp_rank_0_mp_rank_00_optim_states.pt",
    "megatron": "iter_0000200/mp_rank_00/model_optim_rng.pt",
    "megatron-torch_dist": "iter_0000200/__0_0.distcp",
    "hf": "checkpoint-200/model-00001-of-00004.safetensors",
    "hf-weights": "export-200/model-00001-of-00004.safetensors",
    "manifest": "step_0000200/shard-000000.bin",
}
COMMIT_FILE = {  # the file whose bytes commit step 200 (a root pointer for DeepSpeed, Megatron)
    "dcp": "step_0000200/.metadata",
    "deepspeed": "latest",
    "megatron": "latest_checkpointed_iteration.txt",
    "megatron-torch_dist": "iter_0000200/.metadata",
    "hf": "checkpoint-200/trainer_state.json",
    "hf-weights": "export-200/model.safetensors.index.json",
    "manifest": "step_0000200/lifeboat-manifest.json",
}


def write(store, kind: str, step: int, *, commit: bool = True) -> str:
    """A checkpoint as the framework writes it; `commit=False`: killed before its commit point."""
    if kind != "megatron-torch_dist":
        return write_checkpoint(store, kind, step, commit=commit)
    d = f"iter_{step:07d}"
    files = {f"__{i}_0.distcp": shard_bytes(step, i, 256) for i in range(2)}
    for name, data in files.items():
        store.put(f"{d}/{name}", data)
    if commit:
        store.put(f"{d}/.metadata", dcp_metadata({n: len(b) for n, b in files.items()}))
        store.put(f"{d}/common.pt", b"common")
        store.put(f"{d}/metadata.json", b'{"sharded_backend": "torch_dist"}')
        store.put("latest_checkpointed_iteration.txt", str(step).encode())
    return d


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def make(kind: str):
        primary, secondary = LocalStore(tmp_path / "primary"), LocalStore(tmp_path / "secondary")
        layout = "megatron" if kind == "megatron-torch_dist" else kind
        path = tmp_path / "runbook.yaml"
        path.write_text(
            two_site_runbook(
                "matrix",
                primary=f"file://{primary.root}",
                secondary=f"file://{secondary.root}",
                checkpoint={"layout": layout, "retention": {"keep_last": 3}},
                targets={"rpo": "30m"},
            )
        )
        return primary, secondary, str(path)

    return make


def certify(runbook: str, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["certify", runbook, "--json"])
    return code, json.loads(capsys.readouterr().out)


def replicated(runbook: str, capsys) -> None:
    assert main(["replicate", runbook]) == 0, capsys.readouterr()


@pytest.mark.parametrize("kind", LAYOUTS)
def test_a_crash_mid_save_is_neither_replicated_nor_certified(kind, site, capsys):
    primary, secondary, runbook = site(kind)
    write(primary, kind, 100)
    d = write(primary, kind, 200, commit=False)  # the job died before its commit point
    replicated(runbook, capsys)
    assert not list(secondary.list(f"{d}/")), "a half-written save was replicated"
    replicate(primary, secondary, d)  # copied anyway (another tool, or an older Lifeboat)
    code, doc = certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100
    assert [(r["step"], r["reason"]) for r in doc["rejected"]] == [(200, "incomplete layout")]


@pytest.mark.parametrize("kind", LAYOUTS)
def test_a_truncated_commit_file_rejects_only_what_it_commits(kind, site, capsys):
    primary, secondary, runbook = site(kind)
    for step in (100, 200):
        write(primary, kind, step)
    replicated(runbook, capsys)
    key = COMMIT_FILE[kind]
    data = b"".join(secondary.read(key))
    secondary.put(key, data[: len(data) // 2])  # torn write: half the file
    code, doc = certify(runbook, capsys)
    rejected = doc["rejected"]
    if kind in ("deepspeed", "megatron"):
        # the root pointer commits every step: cut short, it names a step that does not match
        # (or none); nothing newer than what it names is trusted
        assert rejected[0]["step"] == 200 and rejected[0]["reason"] == "incomplete layout"
        assert "uncommitted" in rejected[0]["detail"]
        assert code == 2 or doc["certified"]["step"] < 200
        return
    assert code == 0 and doc["certified"]["step"] == 100, doc
    assert rejected[0]["step"] == 200
    assert rejected[0]["reason"] in ("incomplete layout", "bad metadata", "size mismatch")
    assert key.split("/")[-1] in rejected[0]["detail"]


@pytest.mark.parametrize("kind", LAYOUTS)
def test_an_empty_commit_file_never_blocks_an_older_good_step(kind, site, capsys):
    if kind in ("deepspeed", "megatron"):
        pytest.skip("the root pointer is not per step (see the truncated-file test)")
    primary, secondary, runbook = site(kind)
    for step in (100, 200):
        write(primary, kind, step)
    replicated(runbook, capsys)
    secondary.put(COMMIT_FILE[kind], b"")
    code, doc = certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100
    assert doc["rejected"][0]["step"] == 200


@pytest.mark.parametrize("kind", LAYOUTS)
def test_a_shard_missing_on_the_replica_falls_back_to_the_older_step(kind, site, capsys):
    primary, secondary, runbook = site(kind)
    for step in (100, 200):
        write(primary, kind, step)
    replicated(runbook, capsys)
    secondary.delete(SHARD[kind])
    code, doc = certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100
    (rejected,) = doc["rejected"]
    assert rejected["step"] == 200 and rejected["reason"] in ("missing shard", "incomplete layout")
    assert SHARD[kind].split("/")[-1] in rejected["detail"]


@pytest.mark.parametrize("kind", LAYOUTS)
def test_bit_rot_on_a_local_replica_is_caught_without_deep(kind, site, capsys):
    primary, secondary, runbook = site(kind)
    for step in (100, 200):
        write(primary, kind, step)
    replicated(runbook, capsys)
    path = secondary.root / SHARD[kind]
    st = path.stat()
    with open(path, "r+b") as f:  # one byte flipped in place, size and mtime unchanged
        f.seek(st.st_size - 1)
        last = f.read(1)
        f.seek(st.st_size - 1)
        f.write(bytes([last[0] ^ 0x01]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    code, doc = certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100
    (rejected,) = doc["rejected"]
    # the sidecar no longer matches the file's ctime: not trusted, the file was streamed
    assert rejected["step"] == 200 and rejected["reason"] == "crc mismatch"
    assert rejected["detail"].startswith(f"CRC32C mismatch {SHARD[kind]}: replica ")
