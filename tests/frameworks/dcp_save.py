"""Real `torch.distributed.checkpoint` saves by 2 CPU ranks over gloo (spawned processes).

    python tests/frameworks/dcp_save.py OUT_DIR PORT STEP [STEP ...]

writes OUT_DIR/step_NNNNNNN/ per step: each rank its own `__R_0.distcp`, rank 0 `.metadata`
last, exactly as a training job does."""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp


def save(rank: int, world: int, out: str, port: int, steps: list[int]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.Adam(model.parameters())
    for step in steps:
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        state = {
            "model": model.state_dict(),
            "optim": opt.state_dict(),
            "step": step,
            "rank": torch.tensor([rank]),
        }
        dcp.save(state, checkpoint_id=os.path.join(out, f"step_{step:07d}"))
    dist.destroy_process_group()


if __name__ == "__main__":
    out, port, steps = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3:]]
    mp.spawn(save, args=(2, out, port, steps), nprocs=2)
