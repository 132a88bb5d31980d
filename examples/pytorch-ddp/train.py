"""Train a small MLP with DistributedDataParallel (gloo, CPU) and verify the replicas agree.

Needs PyTorch in the Python the tasks run (`pip install torch`; `make test` installs it in
.venv): without it, each worker says so and exits 1.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

try:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
except ImportError:
    sys.exit(
        f"this example needs PyTorch, which {sys.executable} cannot import: install it with "
        "`pip install torch` into the environment the job runs in (a CPU-only wheel is enough: "
        "`pip install torch --index-url https://download.pytorch.org/whl/cpu`), then resubmit"
    )


def shard(rank: int, world: int, n: int = 2048) -> tuple[torch.Tensor, torch.Tensor]:
    """The same synthetic problem everywhere (fixed seed); each rank trains on its own slice."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=generator)
    true_w = torch.arange(1.0, 9.0)
    y = (x @ true_w + 0.5 * torch.sin(x[:, 0]) + 0.01 * torch.randn(n, generator=generator))
    return x[rank::world], y[rank::world].unsqueeze(1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    dist.init_process_group("gloo", init_method="env://")  # MASTER_ADDR/PORT, WORLD_SIZE, RANK
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234 + rank)  # different initial weights per rank: DDP must sync them
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    x, y = shard(rank, world)
    loss_fn = nn.MSELoss()
    first_loss = None
    for epoch in range(args.epochs):
        for start in range(0, len(x), 128):
            optimizer.zero_grad()
            loss = loss_fn(model(x[start : start + 128]), y[start : start + 128])
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            epoch_loss = loss_fn(model(x), y).item()
        first_loss = epoch_loss if first_loss is None else first_loss
        if rank == 0 and epoch % 10 == 0:
            print(f"epoch {epoch:3d} loss {epoch_loss:.4f}", flush=True)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    agree = all(torch.equal(gathered[0], g) for g in gathered)
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]
    print(f"rank {rank}/{world}: final loss {epoch_loss:.4f} (from {first_loss:.4f}), "
          f"weights sha256 {digest}, replicas agree: {agree}", flush=True)
    dist.barrier()  # both ranks reach the teardown together: gloo aborts if its peer is gone
    dist.destroy_process_group()
    return 0 if agree and epoch_loss < first_loss * 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
