"""Real framework checkpoints through the real `lifeboat replicate` and `lifeboat certify`:
`torch.distributed.checkpoint` saves by 2 gloo ranks (spawned once per session), and
`safetensors` files as the HF Trainer and `save_pretrained` lay them out — complete,
corrupted and partial — on local, moto S3 and GCS-emulator secondaries.

Skipped when torch or safetensors is absent (`pip install -e '.[torch]'`)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from lifeboat_dr.providers.storage.local import LocalStore  # noqa: E402
from lifeboat_dr.shell.cli import main  # noqa: E402
from tests.runbook_yaml import two_site_runbook  # noqa: E402

pytestmark = pytest.mark.integration
HERE = Path(__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def dcp_saves(tmp_path_factory) -> Path:
    """step_0000100/ and step_0000200/, each saved by 2 ranks with DCP over gloo."""
    out = tmp_path_factory.mktemp("dcp")
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    subprocess.run(
        [sys.executable, str(HERE / "dcp_save.py"), str(out), str(_free_port()), "100", "200"],
        check=True,
        env=env,
        timeout=240,
    )
    return out


@pytest.fixture(params=["local", "s3", "gcs"])
def secondary(request, tmp_path):
    """(store, the runbook's secondary site fields) for a secondary of each kind."""
    from lifeboat_dr.providers.storage.gcs import GcsStore
    from lifeboat_dr.providers.storage.s3 import S3Store
    from lifeboat_dr.testing.emulators import new_gcs_bucket, new_s3_bucket

    if request.param == "local":
        store = LocalStore(tmp_path / "secondary")
        return store, {"store": f"file://{store.root}"}
    if request.param == "s3":
        url = request.getfixturevalue("s3_endpoint")
        bucket = new_s3_bucket(url)
        return S3Store(bucket, "run", endpoint_url=url), {"store": f"s3://{bucket}/run", "endpoint_url": url}
    url = request.getfixturevalue("gcs_endpoint")
    bucket = new_gcs_bucket(url)
    return GcsStore(bucket, "run", endpoint_url=url), {"store": f"gs://{bucket}/run"}


def _runbook(tmp_path, primary: Path, secondary: dict, layout: str) -> str:
    path = tmp_path / "runbook.yaml"
    path.write_text(
        two_site_runbook(
            "real",
            workload="pretraining",
            primary=f"file://{primary}",
            secondary=secondary,
            checkpoint={"layout": layout, "retention": {"keep_last": 3}},
            targets={"rpo": "30m"},
        )
    )
    return str(path)


def _certify(runbook, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["certify", runbook, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _replicate(runbook, capsys) -> str:
    capsys.readouterr()
    assert main(["replicate", runbook, "--no-progress"]) == 0, capsys.readouterr()
    return capsys.readouterr().out


# -- torch.distributed.checkpoint ----------------------------------------------------------


def _primary_with(dcp_saves: Path, tmp_path) -> Path:
    primary = tmp_path / "primary"
    shutil.copytree(dcp_saves, primary)
    return primary


def test_real_dcp_saves_replicate_and_certify_and_a_missing_rank_file_falls_back(
    dcp_saves, secondary, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    store, lines = secondary
    runbook = _runbook(tmp_path, _primary_with(dcp_saves, tmp_path), lines, "dcp")
    _replicate(runbook, capsys)
    code, doc = _certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 200 and doc["layout"] == "dcp"
    # the primary holds plain files torch wrote (no stored CRC32C): they are streamed, never skipped
    assert sum(doc["certified"]["verified_by"].values()) == 3

    store.delete("step_0000200/__1_0.distcp")  # rank 1's file lost on the replica
    code, doc = _certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100
    assert doc["rejected"][0]["detail"] == "step_0000200: .metadata names __1_0.distcp, which is missing"


def test_a_real_dcp_save_killed_before_metadata_is_not_replicated(dcp_saves, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    primary = _primary_with(dcp_saves, tmp_path)
    (primary / "step_0000200" / ".metadata").unlink()  # rank 0 died before writing it
    secondary = LocalStore(tmp_path / "secondary")
    runbook = _runbook(tmp_path, primary, {"store": f"file://{secondary.root}"}, "dcp")
    _replicate(runbook, capsys)
    assert not list(secondary.list("step_0000200/"))
    code, doc = _certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100


@pytest.mark.parametrize("fault", ["truncated-metadata", "truncated-shard", "flipped-byte"])
def test_a_damaged_real_dcp_replica_falls_back_to_the_older_save(
    dcp_saves, tmp_path, monkeypatch, capsys, fault
):
    monkeypatch.chdir(tmp_path)
    secondary = LocalStore(tmp_path / "secondary")
    runbook = _runbook(
        tmp_path, _primary_with(dcp_saves, tmp_path), {"store": f"file://{secondary.root}"}, "dcp"
    )
    _replicate(runbook, capsys)
    d = secondary.root / "step_0000200"
    if fault == "truncated-metadata":
        (d / ".metadata").write_bytes((d / ".metadata").read_bytes()[:300])
        expected = "not a readable checkpoint metadata pickle"
    elif fault == "truncated-shard":
        os.truncate(d / "__1_0.distcp", 1000)
        expected = "__1_0.distcp, which holds 1000: truncated"
    else:
        path, st = d / "__0_0.distcp", (d / "__0_0.distcp").stat()
        with open(path, "r+b") as f:
            f.seek(st.st_size // 2)
            byte = f.read(1)
            f.seek(st.st_size // 2)
            f.write(bytes([byte[0] ^ 0x80]))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        expected = "CRC32C mismatch step_0000200/__0_0.distcp"
    code, doc = _certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100
    assert expected in doc["rejected"][0]["detail"]


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_the_certified_real_dcp_checkpoint_loads_in_torch(dcp_saves, tmp_path, monkeypatch, capsys):
    import torch.distributed.checkpoint as dcp

    monkeypatch.chdir(tmp_path)
    secondary = LocalStore(tmp_path / "secondary")
    runbook = _runbook(
        tmp_path, _primary_with(dcp_saves, tmp_path), {"store": f"file://{secondary.root}"}, "dcp"
    )
    _replicate(runbook, capsys)
    _, doc = _certify(runbook, capsys)
    state = {"rank": torch.tensor([-1]), "step": 0}
    dcp.load(state, checkpoint_id=doc["certified"]["uri"].removeprefix("file://"))
    assert state["step"] == 200


# -- safetensors: HF Trainer checkpoints and save_pretrained directories --------------------


def _tensors(step: int) -> dict:
    g = torch.Generator().manual_seed(step)
    return {f"layer.{i}.weight": torch.randn(32, 32, generator=g) for i in range(4)}


def _trainer_checkpoint(root: Path, step: int, *, commit: bool = True) -> Path:
    """As `Trainer._save_checkpoint`: weights, optimizer, RNG, then trainer_state.json."""
    d = root / f"checkpoint-{step}"
    d.mkdir(parents=True)
    safetensors_torch.save_file(_tensors(step), d / "model.safetensors")
    torch.save({"state": {}, "param_groups": []}, d / "optimizer.pt")
    torch.save({"cpu": torch.get_rng_state()}, d / "rng_state.pth")
    if commit:
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    return d


def _save_pretrained(root: Path, step: int) -> Path:
    """As `save_pretrained` with max_shard_size: config, shards, then the index."""
    d = root / f"export-{step}"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"model_type": "tiny", "hidden_size": 32}))
    tensors, weight_map = _tensors(step), {}
    for n, names in enumerate((list(tensors)[:2], list(tensors)[2:]), 1):
        shard = f"model-{n:05d}-of-00002.safetensors"
        safetensors_torch.save_file({k: tensors[k] for k in names}, d / shard)
        weight_map.update(dict.fromkeys(names, shard))
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return d


def test_real_trainer_checkpoints_certify_and_a_save_killed_before_trainer_state_does_not(
    secondary, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    store, lines = secondary
    primary = tmp_path / "primary"
    _trainer_checkpoint(primary, 100)
    _trainer_checkpoint(primary, 200, commit=False)  # killed after the weights
    runbook = _runbook(tmp_path, primary, lines, "hf")
    _replicate(runbook, capsys)
    assert not list(store.list("checkpoint-200/"))
    code, doc = _certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100

    (primary / "checkpoint-200" / "trainer_state.json").write_text('{"global_step": 200}')
    _replicate(runbook, capsys)
    code, doc = _certify(runbook, capsys)
    assert doc["certified"]["step"] == 200
    body = b"".join(store.read("checkpoint-200/model.safetensors"))
    flipped = body[:-1] + bytes([body[-1] ^ 1])  # a weight's last byte: the header still adds up
    store.put("checkpoint-200/model.safetensors", flipped)
    code, doc = _certify(runbook, capsys)
    assert doc["certified"]["step"] == 100
    assert doc["rejected"][0]["reason"] == "crc mismatch"


def test_save_pretrained_with_a_shard_cut_short_is_neither_replicated_nor_certified(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    primary = tmp_path / "primary"
    _save_pretrained(primary, 100)
    d = _save_pretrained(primary, 200)
    shard = d / "model-00002-of-00002.safetensors"
    os.truncate(shard, shard.stat().st_size - 64)  # the writer died mid-file
    secondary = LocalStore(tmp_path / "secondary")
    runbook = _runbook(tmp_path, primary, {"store": f"file://{secondary.root}"}, "hf-weights")
    _replicate(runbook, capsys)
    assert not list(secondary.list("export-200/"))
    from lifeboat_dr.standins.checkpoints import replicate

    replicate(LocalStore(primary), secondary, "export-200")  # copied by something else
    code, doc = _certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100
    assert doc["rejected"][0]["detail"].startswith(
        "export-200: export-200/model-00002-of-00002.safetensors: holds "
    )
    assert doc["rejected"][0]["detail"].endswith(": truncated")


# -- DeepSpeed: real torch.save shards; the world size rank 0 recorded --------------------


def _deepspeed_step(root: Path, step: int, dp: int = 4) -> None:
    """As `DeepSpeedEngine.save_checkpoint` with ZeRO-2: rank 0's model states (recording the
    world size), each data-parallel rank's optimizer shard, then `latest`."""
    d = root / f"global_step{step}"
    d.mkdir(parents=True)
    torch.save(
        {"module": _tensors(step), "dp_world_size": dp, "mp_world_size": 1, "ds_version": "0.16.0"},
        d / "mp_rank_00_model_states.pt",
    )
    for rank in range(dp):
        torch.save(
            {"optimizer_state_dict": {"rank": rank}}, d / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"
        )
    (root / "latest").write_text(f"global_step{step}")


def test_a_deepspeed_save_missing_its_last_rank_is_caught_by_the_recorded_world_size(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    primary = tmp_path / "primary"
    _deepspeed_step(primary, 100)
    _deepspeed_step(primary, 200)
    (
        primary / "global_step200" / "zero_pp_rank_3_mp_rank_00_optim_states.pt"
    ).unlink()  # ranks 0-2 look whole
    secondary = LocalStore(tmp_path / "secondary")
    runbook = _runbook(tmp_path, primary, {"store": f"file://{secondary.root}"}, "deepspeed")
    _replicate(runbook, capsys)
    assert (
        not list(secondary.list("global_step200/"))
        and b"".join(secondary.read("latest")) == b"global_step100"
    )
    from lifeboat_dr.standins.checkpoints import replicate

    replicate(LocalStore(primary), secondary, "global_step200")
    secondary.put("latest", b"global_step200")  # even with the pointer saying so
    code, doc = _certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100
    assert doc["rejected"][0]["detail"] == (
        "global_step200: the save had 4 data-parallel ranks (dp_world_size), optim states for 3: "
        "missing zero_pp_rank_3_mp_rank_00_optim_states.pt"
    )


def test_a_megatron_save_missing_its_last_tensor_rank_is_caught_by_the_recorded_args(
    tmp_path, monkeypatch, capsys
):
    import argparse

    monkeypatch.chdir(tmp_path)
    primary = tmp_path / "primary"
    for step in (100, 200):
        for tp in range(4):
            d = primary / f"iter_{step:07d}" / f"mp_rank_{tp:02d}"
            d.mkdir(parents=True)
            args = argparse.Namespace(tensor_model_parallel_size=4, pipeline_model_parallel_size=1)
            torch.save({"args": args, "iteration": step, "model": _tensors(tp)}, d / "model_optim_rng.pt")
        (primary / "latest_checkpointed_iteration.txt").write_text(str(step))
    shutil.rmtree(primary / "iter_0000200" / "mp_rank_03")  # ranks 0-2 look like a whole grid
    secondary = LocalStore(tmp_path / "secondary")
    runbook = _runbook(tmp_path, primary, {"store": f"file://{secondary.root}"}, "megatron")
    _replicate(runbook, capsys)
    assert not list(secondary.list("iter_0000200/"))
    code, doc = _certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100
    from lifeboat_dr.standins.checkpoints import replicate

    replicate(LocalStore(primary), secondary, "iter_0000200")
    secondary.put("latest_checkpointed_iteration.txt", b"200")
    code, doc = _certify(runbook, capsys)
    assert doc["certified"]["step"] == 100
    assert doc["rejected"][0]["detail"] == (
        "iter_0000200: the save had 4 tensor x 1 pipeline ranks (its args), files for 3 x 1"
    )
