"""Completeness = each framework's own commit protocol, checked from the listing and the
small metadata files (never the shards' bytes, never by importing torch).

- dcp: rank 0 writes `.metadata` last; it names every storage file (read with the safe
  reader of core/checkpoints/safe_pickle.py) and each must be present and at least as
  large as the bytes `.metadata` places in it.
- deepspeed: rank 0 writes the root `latest` pointer after every rank saved; a
  `global_stepN/` newer than the step `latest` names is a save that never committed. Every
  rank's shards must be there: model states for each model-parallel rank and optimizer
  states for each (data-parallel, model-parallel) pair, rank numbers 0..N-1 without a gap,
  and N the world size rank 0's model states recorded (`dp_world_size`, `mp_world_size`,
  read from the torch.save zip's header by range: core/checkpoints/torch_zip.py).
- megatron: rank 0 writes `latest_checkpointed_iteration.txt` last; an `iter_N/` past it
  never committed. Every `mp_rank_TT[_PPP]/model_optim_rng.pt` of the tensor x pipeline grid
  (and `distrib_optim.pt` beside each, when one has it), the grid being the one rank 0's
  `args` recorded when readable; or the `torch_dist` format: the DCP protocol plus
  `common.pt` and `metadata.json`.
- hf: the Trainer writes `trainer_state.json` last, after the weights (`model.safetensors`,
  or an index and every shard it names).
- hf-weights: a `save_pretrained` directory has no commit marker, so `config.json`, the
  weights (index + every named shard) and each safetensors header's own length are checked.
- manifest: `lifeboat-manifest.json` exists (committed last); certification checks the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

from lifeboat_dr.core.checkpoints.formats import MAX_SMALL_FILE, safetensors_problem
from lifeboat_dr.core.checkpoints.layouts import HF_INDEX, POINTERS, CheckpointDir
from lifeboat_dr.core.checkpoints.manifest import MANIFEST_NAME
from lifeboat_dr.core.checkpoints.safe_pickle import Stub, dcp_storage_files
from lifeboat_dr.core.checkpoints.torch_zip import read_torch_header
from lifeboat_dr.kernel.errors import ConfigError, NotFound
from lifeboat_dr.providers.storage.base import ObjectInfo, Store

DS_POINTER, MEGATRON_POINTER = POINTERS
_DS_MODEL = re.compile(r"^mp_rank_(\d+)_model_states\.pt$")
_DS_ZERO = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_(optim|model)_states\.pt$")
_MEGATRON = re.compile(r"^mp_rank_(\d+)(?:_(\d+))?/(model_optim_rng|distrib_optim)\.pt$")
_STEP_IN_TAG = re.compile(r"(\d+)(?!.*\d)")


def incomplete_reason(store: Store, layout: str, d: CheckpointDir, pointers: Mapping[str, str]) -> str | None:
    """Why checkpoint `d` did not commit by `layout`'s protocol, or None when it did.
    `pointers` are the store's root pointer files (name -> content), from discovery."""
    check = _CHECKS.get(layout)
    if check is None:
        raise ConfigError(f"unknown checkpoint layout {layout!r}")
    try:
        return check(store, d, pointers)
    except ConfigError as e:  # a metadata file that cannot be read: this step is bad, not the run
        return str(e)


def _manifest(store: Store, d: CheckpointDir, pointers) -> str | None:
    if MANIFEST_NAME not in d.markers:
        return f"uncommitted: no {MANIFEST_NAME} (the manifest is written last)"
    return None


def _dcp(store: Store, d: CheckpointDir, pointers=None) -> str | None:
    if ".metadata" not in d.markers:
        return "uncommitted: no .metadata (rank 0 writes it last): the save did not finish"
    info = d.markers[".metadata"]
    where = f"{d.name}/.metadata"
    named = dcp_storage_files(_read_small(store, info, where), where)
    present = _present(store, d)
    return _named_files_problem(named, present, ".metadata")


def _named_files_problem(named: Mapping[str, int], present: Mapping[str, ObjectInfo], by: str) -> str | None:
    missing = sorted(rel for rel in named if rel not in present)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return f"{by} names {missing[0]}, which is missing{more}"
    for rel, size in sorted(named.items()):
        if present[rel].size < size:
            return f"{by} places {size} bytes in {rel}, which holds {present[rel].size}: truncated"
    return None


def _deepspeed(store: Store, d: CheckpointDir, pointers) -> str | None:
    stale = _past_pointer(d, pointers, DS_POINTER, "DeepSpeed writes it after every rank saved")
    if stale:
        return stale
    model_mp, zero = set(), {"optim": set(), "model": set()}
    for rel in _present(store, d):
        if m := _DS_MODEL.match(rel):
            model_mp.add(int(m.group(1)))
        elif m := _DS_ZERO.match(rel):
            zero[m.group(3)].add((int(m.group(1)), int(m.group(2))))
    if not model_mp and not zero["model"]:
        return "no model states (mp_rank_*_model_states.pt or zero_pp_rank_*_model_states.pt)"
    gap = _gap("model-parallel rank", model_mp, "mp_rank_{:02d}_model_states.pt")
    if gap:
        return gap
    mp_size = max(model_mp | {mp for _, mp in zero["optim"] | zero["model"]}) + 1
    declared = _deepspeed_world(store, d, model_mp, zero["model"])
    if declared and declared[1] != mp_size:
        return f"the save had {declared[1]} model-parallel ranks, files for {mp_size}"
    for kind, pairs in zero.items():
        if not pairs:
            continue
        dp_size = max(dp for dp, _ in pairs) + 1
        if declared and declared[0] != dp_size:
            return (
                f"the save had {declared[0]} data-parallel ranks (dp_world_size), "
                f"{kind} states for {dp_size}: missing zero_pp_rank_{dp_size}_mp_rank_00_{kind}_states.pt"
            )
        for dp in range(dp_size):
            for mp in range(mp_size):
                if (dp, mp) not in pairs:
                    return (
                        f"missing zero_pp_rank_{dp}_mp_rank_{mp:02d}_{kind}_states.pt "
                        f"(the save has {dp_size} data-parallel x {mp_size} model-parallel ranks)"
                    )
    return None


def _deepspeed_world(
    store: Store, d: CheckpointDir, model_mp: set, zero_model: set
) -> tuple[int, int] | None:
    """(dp_world_size, mp_world_size) as rank 0's model states recorded them, or None when
    that file is not a readable torch.save zip (then the rank grid alone is checked)."""
    rel = "mp_rank_00_model_states.pt" if 0 in model_mp else "zero_pp_rank_0_mp_rank_00_model_states.pt"
    if not model_mp and (0, 0) not in zero_model:
        return None
    try:
        header = read_torch_header(store, store.head(f"{d.prefix}{rel}"), f"{d.name}/{rel}")
    except (ConfigError, NotFound):
        return None
    if not isinstance(header, dict):
        return None
    dp, mp = header.get("dp_world_size"), header.get("mp_world_size")
    return (dp, mp) if isinstance(dp, int) and isinstance(mp, int) and dp > 0 and mp > 0 else None


def _megatron(store: Store, d: CheckpointDir, pointers) -> str | None:
    stale = _past_pointer(d, pointers, MEGATRON_POINTER, "Megatron writes it after every rank saved")
    if stale:
        return stale
    if ".metadata" in d.markers:  # torch_dist: DCP, plus Megatron's own files
        for name in ("common.pt", "metadata.json"):
            if name not in d.markers:
                return f"torch_dist checkpoint without {name}"
        return _dcp(store, d)
    files: dict[str, set[tuple[int, int]]] = {"model_optim_rng": set(), "distrib_optim": set()}
    for rel in _present(store, d):
        if m := _MEGATRON.match(rel):
            files[m.group(3)].add((int(m.group(1)), int(m.group(2) or 0)))
    ranks = files["model_optim_rng"]
    if not ranks:
        return "no mp_rank_*/model_optim_rng.pt and no torch_dist .metadata"
    tp, pp = max(t for t, _ in ranks) + 1, max(p for _, p in ranks) + 1
    declared = _megatron_world(store, d, pp > 1)
    if declared and declared != (tp, pp):
        return (
            f"the save had {declared[0]} tensor x {declared[1]} pipeline ranks (its args), "
            f"files for {tp} x {pp}"
        )
    for kind, have in files.items():
        if kind == "distrib_optim" and not have:
            continue
        for t in range(tp):
            for p in range(pp):
                if (t, p) not in have:
                    where = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "")
                    return f"missing {where}/{kind}.pt (the save has {tp} tensor x {pp} pipeline ranks)"
    return None


def _megatron_world(store: Store, d: CheckpointDir, piped: bool) -> tuple[int, int] | None:
    """(tensor, pipeline) parallel sizes from rank 0's `args`, or None when unreadable."""
    rel = f"mp_rank_00{'_000' if piped else ''}/model_optim_rng.pt"
    try:
        header = read_torch_header(store, store.head(f"{d.prefix}{rel}"), f"{d.name}/{rel}")
    except (ConfigError, NotFound):
        return None
    args = header.get("args") if isinstance(header, dict) else None
    if not isinstance(args, Stub):
        return None
    tp, pp = args.field("tensor_model_parallel_size"), args.field("pipeline_model_parallel_size")
    return (tp, pp) if isinstance(tp, int) and isinstance(pp, int) and tp > 0 and pp > 0 else None


def _hf_trainer(store: Store, d: CheckpointDir, pointers) -> str | None:
    if "trainer_state.json" not in d.markers:
        return "uncommitted: no trainer_state.json (the Trainer writes it last)"
    _json(store, d, "trainer_state.json")
    return _hf_weights_problem(store, d, check_headers=False)


def _hf_weights(store: Store, d: CheckpointDir, pointers) -> str | None:
    if "config.json" not in d.markers:
        return "no config.json (save_pretrained writes it with the weights)"
    return _hf_weights_problem(store, d, check_headers=True)


def _hf_weights_problem(store: Store, d: CheckpointDir, *, check_headers: bool) -> str | None:
    present = _present(store, d)
    if HF_INDEX in present:
        index = _json(store, d, HF_INDEX)
        try:
            named = sorted(set(index["weight_map"].values()))
        except (KeyError, TypeError, AttributeError) as e:
            return f"{HF_INDEX} is not a valid safetensors index (no weight_map: {e})"
        problem = _named_files_problem(dict.fromkeys(named, 0), present, HF_INDEX)
        weights = named
    elif "model.safetensors" in present:
        problem, weights = None, ["model.safetensors"]
    elif any(n in present for n in ("pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin")):
        problem, weights = None, []
    else:
        return f"no model.safetensors, {HF_INDEX} or pytorch_model.bin"
    if problem or not check_headers:
        return problem
    for rel in weights:
        if rel.endswith(".safetensors"):
            problem = safetensors_problem(store, present[rel])
            if problem:
                return problem
    return None


def pointer_step(text: str) -> int | None:
    """The step a pointer file names (`global_step1200`, `1200`), or None."""
    m = _STEP_IN_TAG.search(text.strip())
    return int(m.group(1)) if m else None


def _past_pointer(d: CheckpointDir, pointers: Mapping[str, str], name: str, why: str) -> str | None:
    if name not in pointers:
        return f"uncommitted: no {name} pointer ({why})"
    text, step = pointers[name].strip(), pointer_step(pointers[name])
    if step is None:
        return None if text == "release" else f"{name} names {text!r}, not a step: uncommitted ({why})"
    if d.step > step:
        return f"uncommitted: newer than step {step}, which {name} names ({why})"
    return None


def _gap(what: str, ranks: Iterable[int], pattern: str) -> str | None:
    ranks = set(ranks)
    for r in range(max(ranks, default=-1) + 1):
        if r not in ranks:
            return f"missing {pattern.format(r)} ({what} {r} of {max(ranks) + 1})"
    return None


def _present(store: Store, d: CheckpointDir) -> dict[str, ObjectInfo]:
    plen = len(d.prefix)
    return {info.key[plen:]: info for info in d.files(store)}


def _read_small(store: Store, info: ObjectInfo, where: str) -> bytes:
    if info.size > MAX_SMALL_FILE:
        raise ConfigError(f"{where}: {info.size} bytes, over the {MAX_SMALL_FILE} byte limit for metadata")
    try:
        return b"".join(store.read(info.key, 0, MAX_SMALL_FILE))
    except NotFound:
        raise ConfigError(f"{where}: vanished while being read") from None


def _json(store: Store, d: CheckpointDir, rel: str):
    where = f"{d.name}/{rel}"
    info = d.markers.get(rel) or store.head(f"{d.prefix}{rel}")
    try:
        return json.loads(_read_small(store, info, where))
    except ValueError as e:
        raise ConfigError(f"{where} is not valid JSON (truncated?): {e}") from None


_CHECKS = {
    "manifest": _manifest,
    "dcp": _dcp,
    "deepspeed": _deepspeed,
    "megatron": _megatron,
    "hf": _hf_trainer,
    "hf-weights": _hf_weights,
}
