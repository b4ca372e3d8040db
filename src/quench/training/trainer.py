"""`train`: robust fine-tuning of a causal LM, full or LoRA, in one process or several (DDP).

    config checked -> data perturbed (once, cached) and encoded -> model prepared -> for each step:
    collate this process's share of the batch, compute the objective, step, log, save now and then
    -> the merged model exported in Hugging Face format.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from quench.datasets import Problem
from quench.errors import QuenchError
from quench.training import distributed
from quench.training.batching import collate
from quench.training.checkpoint import (
    CONFIG_FILE, LOG_FILE, QUENCH_JSON, STATE_DIR, VARIANTS_FILE, Position, export_model, load_state, rng_state,
    save_state, saved_position,
)
from quench.training.config import AUGMENTING, TrainConfig, check_config
from quench.training.data import (
    Encoder, Example, build_examples, epoch_items, load_or_make_variants, shard, steps_per_epoch,
)
from quench.training.encoding import require_fast
from quench.training.model_setup import prepare_model
from quench.training.objective import LogitsModule, compute_loss

log = logging.getLogger(__name__)
RESUME_INSENSITIVE = ("save_every",)  # may change between a run and its resumption


@dataclass(frozen=True)
class StepLog:
    step: int
    total_steps: int
    epoch: int
    losses: dict[str, float]  # loss, ce, alp, seq, tok (mean over processes)
    lr: float
    tokens: int  # tokens in this step's batches, all processes
    seconds: float


@dataclass(frozen=True)
class TrainResult:
    out: Path
    steps: int
    total_steps: int
    finished: bool  # False: stopped early (`stop_after`); `resume=True` continues
    examples: int
    items_per_epoch: int


def check_out_dir(out: Path, config: TrainConfig, resume: bool, overwrite: bool) -> None:
    if resume:
        found = saved_position(out)
        if found is None:
            raise QuenchError(f"--resume: {out / STATE_DIR} holds no training state")
        saved = {k: v for k, v in found[1].items() if k not in RESUME_INSENSITIVE}
        now = {k: v for k, v in config.to_json().items() if k not in RESUME_INSENSITIVE}
        changed = sorted(k for k in now if saved.get(k) != now[k])
        if changed:
            raise QuenchError(f"--resume: {out} was trained with other settings ({', '.join(changed)}); "
                              "use the same flags, or a new --out")
    elif out.exists() and any(out.iterdir()) and not overwrite:
        raise QuenchError(f"{out} is not empty: pass --resume to continue that run, or --overwrite")


def linear_schedule(optimizer: torch.optim.Optimizer, total: int, warmup_ratio: float) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over the first `warmup_ratio` of the steps, then linear decay to zero."""
    warmup = max(1, math.ceil(total * warmup_ratio)) if warmup_ratio > 0 else 0

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def prepare_examples(config: TrainConfig, loaded: Any, problems: Sequence[Problem], out: Path,
                     procs: distributed.Processes, pool: Any) -> list[Example]:
    """Variants made by the main process (sandbox validation runs once), then encoded by all."""
    variants: list[Problem] = []
    if config.strategies & AUGMENTING:
        if procs.main:
            load_or_make_variants(problems, config.data, out / VARIANTS_FILE, pool)
        distributed.barrier(procs)
        variants = load_or_make_variants(problems, config.data, out / VARIANTS_FILE)
    from quench.models import format_prompt

    encoder = Encoder(loaded.tokenizer, loaded.prompt_format, lambda text: format_prompt(loaded, text), config.masked)
    return build_examples(problems, variants, encoder, config.max_length)


def append_log(out: Path, row: dict[str, Any]) -> None:
    with (out / LOG_FILE).open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def truncate_log(out: Path, step: int) -> None:
    """A resumed run rewrites the steps after its saved state: drop them from the log."""
    path = out / LOG_FILE
    if path.is_file():
        rows = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
        path.write_text("".join(r + "\n" for r in rows))


def train(
    config: TrainConfig,
    loaded: Any,  # quench.models.LoadedModel (model, tokenizer, prompt_format)
    problems: Sequence[Problem],
    out: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    stop_after: int | None = None,
    on_step: Callable[[StepLog], None] | None = None,
    pool: Any = None,
    device: str = "cpu",
) -> TrainResult:
    """Train and export to `out`; `stop_after` N steps saves the state and returns (resume later)."""
    check_config(config)
    require_fast(loaded.tokenizer)
    procs = distributed.start(device)
    check_out_dir(out, config, resume, overwrite)
    distributed.barrier(procs)  # every process has checked before the main one writes
    if procs.main:
        out.mkdir(parents=True, exist_ok=True)
        if not resume:  # --overwrite: nothing of the old run may be resumed or mixed in
            for stale in (VARIANTS_FILE, LOG_FILE, QUENCH_JSON):
                (out / stale).unlink(missing_ok=True)
            shutil.rmtree(out / STATE_DIR, ignore_errors=True)
        (out / CONFIG_FILE).write_text(json.dumps(config.to_json(), indent=2) + "\n")
    torch.manual_seed(config.seed)  # identical LoRA initialisation in every process
    model = prepare_model(loaded.model, config.lora).to(procs.device)
    examples = prepare_examples(config, loaded, problems, out, procs, pool)
    num_items = len(epoch_items(examples, config, 0))
    per_epoch = steps_per_epoch(num_items, config.batch_size, procs.world)
    total = per_epoch * config.epochs
    module: nn.Module = LogitsModule(model)
    if procs.distributed:
        module = nn.parallel.DistributedDataParallel(
            module, device_ids=[procs.device.index] if procs.device.type == "cuda" else None)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = linear_schedule(optimizer, total, config.warmup_ratio)
    torch.manual_seed(config.seed * 1000 + procs.rank)  # dropout differs between processes
    position = load_state(out, model, optimizer, scheduler, procs.rank) if resume else Position(0, 0, 0)
    if procs.main:
        truncate_log(out, position.step)
    log.info("%d examples, %d items per epoch, %d steps per epoch x %d epochs (%d processes)",
             len(examples), num_items, per_epoch, config.epochs, procs.world)
    loop = TrainLoop(config, procs, model, module, optimizer, scheduler, examples, per_epoch, total, out,
                     loaded.tokenizer, on_step)
    try:
        step = loop.run(position, stop_after)
        finished = step >= total
        if finished and procs.main:
            export_model(model, loaded.tokenizer, out, loaded.prompt_format,
                         {"trained_from": config.model, "strategies": sorted(config.strategies),
                          "lora": config.lora is not None, "steps": step})
        distributed.barrier(procs)
    finally:
        # DDP over gloo can hang at exit while the wrapped model and optimizer are alive.
        del loop, module, optimizer, scheduler, params
        distributed.shutdown(procs)  # collects garbage first
    return TrainResult(out, step, total, finished, len(examples), num_items)


class TrainLoop:
    """The step loop and its bookkeeping (logging, saving), separate from the setup above."""

    def __init__(self, config: TrainConfig, procs: distributed.Processes, model: nn.Module, module: nn.Module,
                 optimizer: torch.optim.Optimizer, scheduler: Any, examples: list[Example], per_epoch: int,
                 total: int, out: Path, tokenizer: Any, on_step: Callable[[StepLog], None] | None) -> None:
        self.config, self.procs, self.model, self.module = config, procs, model, module
        self.optimizer, self.scheduler, self.examples = optimizer, scheduler, examples
        self.per_epoch, self.total, self.out, self.on_step = per_epoch, total, out, on_step
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.params = [p for p in model.parameters() if p.requires_grad]

    def run(self, position: Position, stop_after: int | None) -> int:
        step = position.step
        self.module.train()
        for epoch in range(position.epoch, self.config.epochs):
            items = epoch_items(self.examples, self.config, epoch)
            first = position.batch if epoch == position.epoch else 0
            for index in range(first, self.per_epoch):
                self.train_step(items, epoch, index, step)
                step += 1
                done = index + 1 == self.per_epoch
                next_position = Position(step, epoch + 1, 0) if done else Position(step, epoch, index + 1)
                stopping = stop_after is not None and step - position.step >= stop_after and step < self.total
                if step % self.config.save_every == 0 or stopping or step == self.total:
                    self.save(next_position)
                if stopping:
                    return step
        return step

    def train_step(self, items: list, epoch: int, index: int, step: int) -> None:
        started = time.perf_counter()
        seed = ((self.config.seed * 1_000_003 + epoch) * 1_000_003 + index) * 256 + self.procs.rank
        generator = torch.Generator().manual_seed(seed % 2**62)  # cl-tok's sample: same after a resume
        mine = shard(items, index, self.config.batch_size, self.procs.rank, self.procs.world)
        batch = collate(mine, self.pad_id, self.config.losses.tok_max_aligned, generator).to(self.procs.device)
        parts = compute_loss(self.module, batch, self.config.strategies, self.config.losses)
        parts.total.backward()
        if self.config.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip)
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        values = parts.as_dict()
        keys = sorted(values)
        means = distributed.mean(self.procs, [values[k] for k in keys] + [float(batch.num_tokens)])
        if self.procs.main:
            row = StepLog(step + 1, self.total, epoch, dict(zip(keys, means[:-1])), lr,
                          int(means[-1] * self.procs.world), time.perf_counter() - started)
            append_log(self.out, {"step": row.step, "epoch": epoch, "lr": lr, "tokens": row.tokens,
                                  "seconds": round(row.seconds, 3), **{k: round(v, 6) for k, v in row.losses.items()}})
            if self.on_step:
                self.on_step(row)

    def save(self, position: Position) -> None:
        rngs = distributed.gather(self.procs, rng_state())
        if self.procs.main:
            save_state(self.out, self.model, self.optimizer, self.scheduler, position, rngs, self.config.to_json())
        distributed.barrier(self.procs)
