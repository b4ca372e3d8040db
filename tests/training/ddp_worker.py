"""One process of the two-process DDP test: `torchrun --nproc_per_node 2 ddp_worker.py OUT`."""

import os
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]
from training_helpers import tiny_loaded, tiny_problems  # noqa: E402

from quench.training import DataSettings, TrainConfig, train  # noqa: E402

torch.set_num_threads(1)
out = Path(sys.argv[1])
loaded = tiny_loaded("completion")
config = TrainConfig(model="tiny", strategies=frozenset({"alpd", "cl-seq"}), lora=None, epochs=2, batch_size=2,
                     lr=3e-3, max_length=400, save_every=1,
                     data=DataSettings(transforms=("DeadCodeInserter", "VarRenamerNaive"), validate=False))
result = train(config, loaded, tiny_problems(), out)
torch.save(loaded.model.state_dict(), out / f"rank{os.environ['RANK']}.pt")
print(f"rank {os.environ['RANK']}: {result.steps} steps, finished {result.finished}")
