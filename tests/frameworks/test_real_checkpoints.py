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


# -- torn shards under a commit marker: each file's own format gives it away ---------------


def _megatron_step(root: Path, step: int, tp: int = 2) -> None:
    """As Megatron's `save_checkpoint`: each tensor rank's `model_optim_rng.pt` (recording the
    parallel sizes in its args), then the iteration pointer."""
    import argparse

    for rank in range(tp):
        d = root / f"iter_{step:07d}" / f"mp_rank_{rank:02d}"
        d.mkdir(parents=True)
        args = argparse.Namespace(tensor_model_parallel_size=tp, pipeline_model_parallel_size=1)
        torch.save({"args": args, "iteration": step, "model": _tensors(rank)}, d / "model_optim_rng.pt")
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))


def _manifest_step(root: Path, step: int) -> None:
    """A plain training script's save: weights and optimizer, then `lifeboat manifest write`."""
    d = root / f"step_{step:07d}"
    d.mkdir(parents=True)
    safetensors_torch.save_file(_tensors(step), d / "model.safetensors")
    torch.save({"state": {0: {"exp_avg": torch.zeros(64, 64)}}}, d / "optimizer.pt")
    _manifest_over(root, d.name, step)


def _manifest_over(root: Path, name: str, step: int) -> None:
    """(Re)write the manifest of `root/name/` over the files as they are now."""
    from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME, build_manifest, commit_manifest

    store = LocalStore(root)
    store.delete(f"{name}/{MANIFEST_NAME}")
    commit_manifest(store, name, build_manifest(store, name, step))


def _torn_tail(path: Path) -> None:
    """The file's last bytes never reached the disk (a torn write): the size it has now is
    the size it is listed, copied and checksummed at."""
    os.truncate(path, path.stat().st_size - 512)


TORN = {  # case -> (layout, writes steps 100 and 200 under root, the file of step 200 torn)
    "hf-model-safetensors": (
        "hf",
        lambda r, s: _trainer_checkpoint(r, s),
        "checkpoint-200/model.safetensors",
    ),
    "hf-optimizer-pt": ("hf", lambda r, s: _trainer_checkpoint(r, s), "checkpoint-200/optimizer.pt"),
    "deepspeed-optim-states": (
        "deepspeed",
        lambda r, s: _deepspeed_step(r, s, dp=2),
        "global_step200/zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ),
    "megatron-model-optim-rng": (
        "megatron",
        lambda r, s: _megatron_step(r, s),
        "iter_0000200/mp_rank_01/model_optim_rng.pt",
    ),
    "manifest-optimizer-pt": ("manifest", _manifest_step, "step_0000200/optimizer.pt"),
}


@pytest.mark.parametrize("case", sorted(TORN))
def test_a_torn_shard_under_its_commit_marker_is_caught_and_certification_falls_back(
    case, tmp_path, monkeypatch, capsys
):
    layout, save, torn = TORN[case]
    monkeypatch.chdir(tmp_path)
    primary = tmp_path / "primary"
    for step in (100, 200):
        save(primary, step)
    _torn_tail(primary / torn)
    if layout == "manifest":  # the manifest was written after the tear: it vouches for the torn bytes
        _manifest_over(primary, "step_0000200", 200)
    secondary = LocalStore(tmp_path / "secondary")
    runbook = _runbook(tmp_path, primary, {"store": f"file://{secondary.root}"}, layout)
    _replicate(runbook, capsys)  # the primary's bytes, faithfully: source and replica agree

    code, doc = _certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100, doc["rejected"]
    rejected = doc["rejected"][0]
    assert rejected["step"] == 200 and torn in rejected["detail"], rejected
    assert rejected["reason"] == "torn file" and rejected["detail"].endswith(("torn", "truncated"))


# -- a torch-only gadget in a DCP .metadata: refused by certification and by the resume ----


class _Gadget:
    """Unpickles into a call of `torch.save`: writes a file wherever the pickle says."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (torch.save, ({"owned": True}, str(self.path)))


def _plant_gadget(checkpoint: Path, pwned: Path) -> None:
    """Rewrite a real `.metadata` with the gadget riding in `planner_data`."""
    import pickle

    with open(checkpoint / ".metadata", "rb") as f:
        metadata = pickle.load(f)  # our own test save: trusted
    metadata.planner_data = _Gadget(pwned)
    (checkpoint / ".metadata").write_bytes(pickle.dumps(metadata))


def test_a_torch_gadget_in_a_real_dcp_metadata_never_certifies_and_never_runs(
    dcp_saves, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    primary = _primary_with(dcp_saves, tmp_path)
    pwned = tmp_path / "pwned.pt"
    _plant_gadget(primary / "step_0000200", pwned)
    secondary = LocalStore(tmp_path / "secondary")
    runbook = _runbook(tmp_path, primary, {"store": f"file://{secondary.root}"}, "dcp")
    _replicate(runbook, capsys)
    code, doc = _certify(runbook, capsys)
    assert code == 0 and doc["certified"]["step"] == 100
    assert not pwned.exists()
    # not copied as a committed save, or copied and refused: never certified
    for rejected in doc["rejected"]:
        assert "refused global torch.serialization.save" in rejected["detail"]


def test_the_dcp_trainer_resume_refuses_a_torch_gadget_in_metadata_and_runs_nothing(dcp_saves, tmp_path):
    from lifeboat_dr.kernel.errors import ConfigError
    from lifeboat_dr.standins.trainer.dcp import load_checkpoint

    checkpoint = _primary_with(dcp_saves, tmp_path) / "step_0000200"
    pwned = tmp_path / "pwned.pt"
    _plant_gadget(checkpoint, pwned)
    with pytest.raises(ConfigError, match=r"\.metadata: .*refused global torch\.serialization\.save"):
        load_checkpoint(None, None, checkpoint)
    assert not pwned.exists()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_the_dcp_trainer_reader_loads_a_real_save_through_the_allow_list(dcp_saves):
    import torch.distributed.checkpoint as dcp

    from lifeboat_dr.standins.trainer.dcp import SafeReader

    state = {"rank": torch.tensor([-1]), "step": 0}
    dcp.load(state, storage_reader=SafeReader(dcp_saves / "step_0000200"))
    assert state["step"] == 200


def test_the_metadata_allow_list_is_what_this_torch_pickles_into_a_dcp_metadata(dcp_saves):
    import pickle

    import torch.distributed.checkpoint.metadata as dcp_metadata

    from lifeboat_dr.core.checkpoints.safe_pickle import DCP_METADATA_GLOBALS, load_dcp_metadata

    classes = {("torch.distributed.checkpoint.metadata", n) for n in dcp_metadata.__all__}
    assert classes <= DCP_METADATA_GLOBALS  # every class Metadata is built from
    dtypes = {d for d in vars(torch).values() if isinstance(d, torch.dtype)}
    assert {("torch", d.__reduce__()) for d in dtypes} <= DCP_METADATA_GLOBALS  # pickled by name
    data = (dcp_saves / "step_0000200" / ".metadata").read_bytes()
    assert load_dcp_metadata(data, ".metadata") == pickle.loads(data)  # the same Metadata, built safely
