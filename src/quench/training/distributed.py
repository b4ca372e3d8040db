"""Several processes with torch.distributed: started by `torchrun --nproc_per_node N`.

gloo on CPU, NCCL on GPU. (`accelerate launch --cpu --num_processes 2` starts only one process on
CPU.) Two-process DDP with gloo can hang at exit unless the wrapped model and the optimizer are
released before `destroy_process_group()`: `shutdown` is called after the trainer drops them.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Processes:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1


def start(device: str) -> Processes:
    """Join the process group torchrun describes in the environment; a single process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device.startswith("cuda")
    place = torch.device(f"cuda:{local_rank}" if cuda and world > 1 else device)
    if world > 1 and not dist.is_initialized():
        if cuda:
            torch.cuda.set_device(place)
        dist.init_process_group("nccl" if cuda else "gloo")
    return Processes(rank, world, local_rank, place)


def barrier(procs: Processes) -> None:
    if procs.distributed:
        dist.barrier()


def mean(procs: Processes, values: list[float]) -> list[float]:
    """Element-wise mean over the processes (for the logged losses)."""
    if not procs.distributed:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=procs.device if procs.device.type == "cuda" else "cpu")
    dist.all_reduce(tensor)
    return (tensor / procs.world).tolist()


def gather(procs: Processes, obj: Any) -> list[Any]:
    """Every process's `obj`, in rank order (used for the RNG states of a checkpoint)."""
    if not procs.distributed:
        return [obj]
    out: list[Any] = [None] * procs.world
    dist.all_gather_object(out, obj)
    return out


def shutdown(procs: Processes) -> None:
    gc.collect()
    if procs.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
