"""Symlinks in a `file://` store: a key names the file at that path under the root, and never
a file outside the store or in another checkpoint's folder."""

import os

import pytest

from lifeboat_dr.kernel.crc32c import crc32c
from lifeboat_dr.kernel.errors import ConfigError
from lifeboat_dr.providers.storage.local import LocalStore


@pytest.fixture
def store(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.put("step_10/shard-0.bin", b"step 10")
    return store


def test_a_symlink_leaving_the_store_is_listed_and_refused_by_name(store, tmp_path):
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"not checkpoint data")
    (store.root / "step_20").mkdir()
    os.symlink(secret, store.root / "step_20" / "shard-0.bin")
    listed = {i.key for i in store.list()}
    assert listed == {"step_10/shard-0.bin", "step_20/shard-0.bin"}  # seen, so it can be named
    for call in (
        lambda: store.head("step_20/shard-0.bin"),
        lambda: b"".join(store.read("step_20/shard-0.bin")),
    ):
        with pytest.raises(ConfigError, match=r"step_20/shard-0.bin: refused: a symlink leaving the store"):
            call()


def test_writing_over_a_symlink_replaces_the_link_and_never_the_file_it_names(store):
    (store.root / "step_20").mkdir()
    os.symlink("../step_10/shard-0.bin", store.root / "step_20" / "shard-0.bin")
    store.put("step_20/shard-0.bin", b"step 20")
    assert b"".join(store.read("step_10/shard-0.bin")) == b"step 10"
    assert store.head("step_10/shard-0.bin").crc32c == crc32c(b"step 10")
    assert b"".join(store.read("step_20/shard-0.bin")) == b"step 20"

    os.unlink(store.root / "step_20" / "shard-0.bin")
    os.symlink("../step_10/shard-0.bin", store.root / "step_20" / "shard-0.bin")
    store.delete("step_20/shard-0.bin")  # the link goes, the file it named stays
    assert b"".join(store.read("step_10/shard-0.bin")) == b"step 10"


def test_a_key_through_a_symlinked_folder_is_refused(store):
    os.symlink("step_10", store.root / "step_20")
    with pytest.raises(ConfigError, match=r"step_20/shard-0.bin: refused: .*symlink"):
        store.put("step_20/shard-0.bin", b"step 20")
    assert b"".join(store.read("step_10/shard-0.bin")) == b"step 10"


def test_create_only_on_a_filesystem_without_hard_links_still_has_one_winner(store, monkeypatch):
    """Create-only links its file into place; where the filesystem refuses hard links (some
    FUSE mounts) it checks and renames under the key's lock instead."""
    import errno

    from lifeboat_dr.kernel.errors import PreconditionFailed
    from lifeboat_dr.providers.storage import local

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(local.os, "link", no_links)
    written = store.put("step_20/lifeboat-commit.json", b"epoch 1", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put("step_20/lifeboat-commit.json", b"epoch 0", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.server_copy(store, "step_10/shard-0.bin", "step_20/lifeboat-commit.json", if_none_match=True)
    assert b"".join(store.read("step_20/lifeboat-commit.json")) == b"epoch 1"
    assert store.head("step_20/lifeboat-commit.json") == written
    assert sorted(os.listdir(store.root / "step_20")) == [
        ".lifeboat-commit.json.crc32c",
        "lifeboat-commit.json",
    ]


def test_a_folder_swapped_for_a_symlink_after_a_read_is_refused_on_the_next(store, tmp_path):
    """The folder check is paid per folder below the root, never remembered: a folder read
    once and then replaced by a link (here, deep in the path) is refused the next time."""
    store.put("step_30/rank/shard-0.bin", b"step 30")
    assert b"".join(store.read("step_30/rank/shard-0.bin")) == b"step 30"
    outside = tmp_path / "outside"
    (store.root / "step_30" / "rank").rename(outside)
    os.symlink(outside, store.root / "step_30" / "rank")
    for call in (
        lambda: b"".join(store.read("step_30/rank/shard-0.bin")),
        lambda: store.head("step_30/rank/shard-0.bin"),
        lambda: store.put("step_30/rank/shard-0.bin", b"over"),
        lambda: store.delete("step_30/rank/shard-0.bin"),
    ):
        with pytest.raises(ConfigError, match=r"a folder on its path is a symlink"):
            call()
    assert (outside / "shard-0.bin").read_bytes() == b"step 30"
