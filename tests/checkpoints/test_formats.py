"""Torn files caught by their own format (core/checkpoints/formats.py), from a few ranged
reads at their ends: real `torch.save` zips and safetensors files, whole, cut short and
padded, with what each check reads counted."""

from __future__ import annotations

import io
import json
import struct
import zipfile

import pytest

from lifeboat_dr.core.checkpoints.formats import safetensors_problem, torch_zip_problem, torn_file
from lifeboat_dr.testing.memory_store import MemoryStore


class Ranges(MemoryStore):
    """A memory store that records every ranged read it serves."""

    def __init__(self):
        super().__init__()
        self.reads: list[tuple[int, int]] = []

    def read(self, key, start=0, end=None):
        data = b"".join(super().read(key, start, end))
        self.reads.append((start, start + len(data)))
        yield data

    @property
    def bytes_read(self) -> int:
        return sum(end - start for start, end in self.reads)


def _torch_save(obj, **kwargs) -> bytes:
    torch = pytest.importorskip("torch")
    out = io.BytesIO()
    torch.save(obj, out, **kwargs)
    return out.getvalue()


def _put(store, key: str, data: bytes):
    return store.put(key, data)


def test_a_whole_torch_save_zip_is_judged_from_its_last_98_bytes():
    torch = pytest.importorskip("torch")
    store = Ranges()
    info = _put(store, "global_step1/mp_rank_00_model_states.pt", _torch_save({"w": torch.zeros(1 << 21)}))
    assert info.size > 8 << 20
    assert torch_zip_problem(store, info) is None
    assert store.reads == [(info.size - 98, info.size)]


CUTS = {  # how much of the file reached the disk
    "all but its last byte": lambda n: n - 1,
    "all but its end records": lambda n: n - 98,
    "half": lambda n: n // 2,
    "its first entry": lambda n: 200,
}


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_a_torch_save_zip_cut_short_anywhere_is_torn(cut):
    torch = pytest.importorskip("torch")
    data = _torch_save({"w": torch.arange(50_000), "step": 7})
    store = Ranges()
    info = _put(store, "ckpt/optimizer.pt", data[: CUTS[cut](len(data))])
    problem = torch_zip_problem(store, info)
    assert problem is not None and problem.startswith("ckpt/optimizer.pt: ") and problem.endswith("torn")
    assert store.bytes_read <= 98 + 4 + 22 + 0xFFFF  # the tail, the head, one search of the tail


def test_a_torch_save_zip_with_bytes_appended_is_not_whole():
    torch = pytest.importorskip("torch")
    store = Ranges()
    info = _put(store, "ckpt/model.pt", _torch_save({"w": torch.ones(100)}) + b"\0" * 4096)
    assert torch_zip_problem(store, info).endswith("torn")


def test_a_zip_with_a_comment_and_no_zip64_records_adds_up():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.comment = b"written by hand"
    store = Ranges()
    assert torch_zip_problem(store, _put(store, "ckpt/extra.pt", out.getvalue())) is None


def test_a_file_that_never_was_a_zip_is_not_judged():
    store = Ranges()
    legacy = _torch_save({"w": 1}, _use_new_zipfile_serialization=False)
    assert torch_zip_problem(store, _put(store, "ckpt/legacy.pt", legacy)) is None
    assert torch_zip_problem(store, _put(store, "ckpt/raw.pt", b"raw shard bytes" * 100)) is None


def _safetensors(n: int) -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}).encode()
    return struct.pack("<Q", len(header)) + header + b"\1" * (4 * n)


def test_a_safetensors_file_is_judged_by_its_header_alone():
    store = Ranges()
    data = _safetensors(1 << 20)
    info = _put(store, "checkpoint-1/model.safetensors", data)
    assert safetensors_problem(store, info) is None
    assert store.bytes_read == len(data) - 4 * (1 << 20)  # length and header, no tensor byte
    torn = _put(store, "checkpoint-2/model.safetensors", data[:-1])
    assert safetensors_problem(store, torn).endswith("truncated")


def test_every_layout_judges_its_torch_and_safetensors_files_by_name():
    store = Ranges()
    files = [
        _put(store, "checkpoint-1/model.safetensors", _safetensors(8)),
        _put(store, "checkpoint-1/pytorch_model.bin", b"PK\x03\x04" + b"\0" * 200),  # torn torch.save
        _put(store, "checkpoint-1/shard-0.bin", b"raw"),
    ]
    assert torn_file(store, files, "hf").startswith("checkpoint-1/pytorch_model.bin: ")
    assert torn_file(store, files, "manifest") is None  # a .bin is torch's only where HF writes it
    assert torn_file(store, files[2:], "hf") is None
