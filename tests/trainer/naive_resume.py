"""Two wrong resumes of the torch trainer, run under torchrun by test_dcp_trainer.py (the
negative control: the exact-resume test can fail). Writes `{variant: {step: loss}}` to OUT.

    torchrun --nproc-per-node 2 naive_resume.py CHECKPOINT STEPS OUT

- fresh_optimizer: model weights and RNG loaded, the optimizer built anew (Adam's moments lost:
  the silent bug of loading into a fresh optimizer's empty state_dict()).
- no_rng: model and optimizer loaded, the RNG state not (other batches, other dropout masks).
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

from lifeboat_dr.standins.trainer import dcp as trainer


def resume(path: Path, steps: int, *, keep_optimizer: bool, keep_rng: bool) -> dict[int, float]:
    model, optimizer, target = trainer.build(0)
    state = trainer.checkpoint_state(model, optimizer, 0)
    dcp.load(state, checkpoint_id=path)
    if keep_optimizer:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    else:
        set_model_state_dict(model, state["model"])
        optimizer = torch.optim.AdamW(model.parameters(), lr=trainer.LR)
    if keep_rng:
        torch.set_rng_state(state["rng"][f"rank{dist.get_rank()}"])
    start = int(state["step"])
    return {step: trainer.train_step(model, optimizer, target) for step in range(start + 1, steps + 1)}


def main() -> None:
    path, steps, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    found = {
        "fresh_optimizer": resume(path, steps, keep_optimizer=False, keep_rng=True),
        "no_rng": resume(path, steps, keep_optimizer=True, keep_rng=False),
    }
    if dist.get_rank() == 0:
        out.write_text(json.dumps(found))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
