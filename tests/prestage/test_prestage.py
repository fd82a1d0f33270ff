"""Prestage readiness: what the approval card shows about images and weights on the secondary."""

from __future__ import annotations

from lifeboat_dr.core.prestage import (
    check_readiness,
    destination_for,
    plan_readiness,
    stage_plan_weights,
    stage_weights,
)
from lifeboat_dr.flows.wiring import prestage_plan
from lifeboat_dr.providers.image_registry import FakeRegistry, OciRegistry
from lifeboat_dr.providers.storage import open_store
from lifeboat_dr.runbooks.model import Runbook

PINNED = "sha256:" + "0f" * 32
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


def _weights(tmp_path):
    src = tmp_path / "hub" / "llama3" / "tokenizer"
    src.mkdir(parents=True)
    (src / "tokenizer.json").write_bytes(b'{"vocab": 128256}')
    (src / "tokenizer.model").write_bytes(bytes(range(256)) * 64)
    return src


def test_weights_not_ready_until_staged_then_ready_and_staging_again_moves_nothing(tmp_path):
    src = _weights(tmp_path)
    secondary = f"file://{tmp_path / 'secondary'}"
    source = f"file://{src}"
    registry = FakeRegistry({IMAGE: PINNED})
    before = check_readiness([(IMAGE, PINNED)], [source], secondary, registry, open_store)
    assert not before.ready and "0/2 objects staged" in before.weights[0].detail
    assert before.weights[0].missing_count == 2 and before.images[0].ok

    stage_weights(source, destination_for(secondary, source), open_store)
    after = check_readiness([(IMAGE, PINNED)], [source], secondary, registry, open_store)
    assert after.ready and "2/2 objects staged" in after.weights[0].detail
    assert after.summary() == "prestaged: 2/2 ready"
    assert (tmp_path / "secondary" / "prestage" / str(src).strip("/") / "tokenizer.model").read_bytes() == (
        src / "tokenizer.model"
    ).read_bytes()

    again = stage_weights(source, destination_for(secondary, source), open_store)
    moved = again if isinstance(again, list) else again.copied + again.server_copied
    assert moved == []


def test_a_changed_source_object_makes_the_staged_copy_stale(tmp_path):
    src = _weights(tmp_path)
    secondary, source = f"file://{tmp_path / 'secondary'}", f"file://{src}"
    stage_weights(source, destination_for(secondary, source), open_store)
    (src / "tokenizer.json").write_bytes(b'{"vocab": 128257, "retrained": true}')
    check = check_readiness([], [source], secondary, FakeRegistry(), open_store)
    assert not check.ready and check.weights[0].missing == ("tokenizer.json",)


def test_image_digest_drift_is_not_ready_and_says_both_digests(tmp_path):
    drifted = "sha256:" + "aa" * 32
    check = check_readiness(
        [(IMAGE, PINNED)], [], "file:///unused", FakeRegistry({IMAGE: drifted}), open_store
    )
    assert not check.ready and "differs from pinned" in check.items[0]
    absent = check_readiness([(IMAGE, PINNED)], [], "file:///unused", FakeRegistry(), open_store)
    assert not absent.ready and "absent" in absent.items[0]


def test_registry_outage_is_shown_not_raised(tmp_path):
    check = check_readiness([(IMAGE, PINNED)], [], "file:///unused", FakeRegistry(down=True), open_store)
    assert not check.ready and "unreachable" in check.items[0]


def test_runbook_prestage_against_a_real_http_registry(tmp_path, stub_registry):
    src = _weights(tmp_path)
    stub_registry.require_token = True
    stub_registry.manifests[("nvcr/nvidia/pytorch", "24.05-py3")] = PINNED
    rb = Runbook.model_validate(
        {
            "name": "llm",
            "workload": "finetuning",
            "primary": {"infra": "local", "store": f"file://{tmp_path / 'primary'}"},
            "secondary": {
                "infra": "local",
                "store": f"file://{tmp_path / 'secondary'}",
                "candidates": [{"infra": "local"}],
            },
            "job": {"command": "true"},
            "checkpoint": {"cadence": "10m"},
            "prestage": {"images": [{"image": IMAGE, "digest": PINNED}], "weights": [f"file://{src}"]},
        }
    )
    registry = OciRegistry(mirror={"nvcr.io": f"{stub_registry.url}/nvcr"})
    plan = prestage_plan(rb)
    assert not plan_readiness(plan, registry, open_store).ready
    stage_plan_weights(plan, open_store)
    ready = plan_readiness(plan, registry, open_store)
    assert ready.ready, ready.items
    assert [c.found for c in ready.images] == [PINNED]
