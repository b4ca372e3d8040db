"""GenGuard training data: answers of the target on training prompts, labelled, with hidden states.

Building runs in two passes. (1) Generate: greedy answers without early stopping (EOS or the
token limit), saved to `answers.jsonl` as they come (a killed build resumes). (2) Label and
featurize: label each answer's tokens by `labels.RULE`, then one teacher-forced forward per answer
collects the final-norm hidden state at every generated token.

A dataset directory holds `features.safetensors` (hidden (N, D), labels (N,), sequence (N,),
position (N,), shape (N, 3): each token's newline layout for the policy), `sequences.jsonl` (one
record per labelled answer) and `meta.json`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch

from quench.datasets import Problem
from quench.errors import QuenchError
from quench.engine.types import Backend, GenerationRequest, SamplingParams
from quench.stopping.guard import FEATURE, token_shapes
from quench.stopping.labels import RULE, excess_start, token_labels, token_starts
from quench.stopping.policy import TokenShape

log = logging.getLogger(__name__)

ANSWERS, FEATURES, SEQUENCES, META = "answers.jsonl", "features.safetensors", "sequences.jsonl", "meta.json"


@dataclass
class GuardDataset:
    hidden: torch.Tensor  # (N, D) one row per generated token
    labels: torch.Tensor  # (N,) uint8: 1 = stop (excess), 0 = continue
    sequence: torch.Tensor  # (N,) int32: index into `records`
    position: torch.Tensor  # (N,) int32: the token's index in its answer
    shape: torch.Tensor  # (N, 3) uint8: newlines (capped at 255), head blank, tail blank (see TokenShape)
    records: list[dict]  # per answer: task_id, split, num_tokens, excess_token, finish_reason, text
    meta: dict

    @property
    def hidden_size(self) -> int:
        return int(self.hidden.shape[1])

    def save(self, out: Path) -> None:
        from safetensors.torch import save_file

        out.mkdir(parents=True, exist_ok=True)
        tensors = {
            "hidden": self.hidden, "labels": self.labels, "sequence": self.sequence,
            "position": self.position, "shape": self.shape,
        }
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / FEATURES))
        (out / SEQUENCES).write_text("".join(json.dumps(r) + "\n" for r in self.records))
        (out / META).write_text(json.dumps(self.meta, indent=2, sort_keys=True) + "\n")

    def languages(self) -> list[str]:
        """Each answer's language (answers built before MBXP carry none: Python)."""
        return [r.get("language", "python") for r in self.records]

    def select(self, keep: Sequence[bool]) -> "GuardDataset":
        """The answers where `keep` (A,) is true, renumbered."""
        kept = [a for a, flag in enumerate(keep) if flag]
        if not kept:
            raise QuenchError("no answers left after selecting by language")
        renumber = torch.full((len(self.records),), -1, dtype=torch.int32)
        renumber[torch.tensor(kept)] = torch.arange(len(kept), dtype=torch.int32)
        rows = renumber[self.sequence.long()] >= 0  # (N,)
        return GuardDataset(
            self.hidden[rows], self.labels[rows], renumber[self.sequence.long()][rows], self.position[rows],
            self.shape[rows], [self.records[a] for a in kept], dict(self.meta),
        )

    @staticmethod
    def load(directory: Path) -> "GuardDataset":
        from safetensors.torch import load_file

        for name in (FEATURES, SEQUENCES, META):
            if not (directory / name).is_file():
                raise QuenchError(
                    f"{directory}: not a guard dataset (no {name}; build one with `quench guard build-data`)"
                )
        try:
            tensors = load_file(str(directory / FEATURES))
            records = [json.loads(line) for line in (directory / SEQUENCES).read_text().splitlines() if line.strip()]
            meta = json.loads((directory / META).read_text())
            data = GuardDataset(
                tensors["hidden"], tensors["labels"], tensors["sequence"], tensors["position"], tensors["shape"],
                records, meta,
            )
        except Exception as err:  # safetensors and json raise several types for a damaged file
            raise QuenchError(f"{directory}: damaged guard dataset ({type(err).__name__}: {err})") from None
        if not (len(data.labels) == len(data.sequence) == len(data.hidden)) or data.hidden.ndim != 2:
            raise QuenchError(f"{directory}: damaged guard dataset (tensor lengths differ)")
        return data


def generate_answers(
    problems: Sequence[tuple[str, Problem]],
    backend: Backend,
    encode: Callable[[str], tuple[int, ...]],
    max_new_tokens: int,
    path: Path,
    on_answer: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Greedy answers for (split, problem) pairs, no stop sequences; appended to `path`, resumed from it."""
    done = {r["task_id"]: r for r in read_answers(path)}
    path.write_text("".join(json.dumps(r) + "\n" for r in done.values()))  # drops a line cut by a kill
    todo = [(split, p) for split, p in problems if p.task_id not in done]
    split_of = {p.task_id: split for split, p in todo}
    requests = [GenerationRequest(key=p.task_id, prompt_ids=encode(p.prompt)) for _, p in todo]
    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    with path.open("a") as sink:
        for result in backend.generate(requests, sampling) if requests else ():
            record = {
                "task_id": result.key, "split": split_of[result.key], "token_ids": list(result.token_ids),
                "text": result.text, "finish_reason": result.finish_reason,
            }
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            done[result.key] = record
            if on_answer is not None:
                on_answer(record)
    order = [p.task_id for _, p in problems]
    return [done[t] for t in order if t in done]


@torch.inference_mode()
def answer_features(model: Any, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> torch.Tensor:
    """Teacher-forced final-norm hidden states (n, D) at the positions where each answer token is fed."""
    ids = torch.tensor([list(prompt_ids) + list(token_ids)])  # (1, P + n)
    output = model(input_ids=ids, output_hidden_states=True)
    hidden = output.hidden_states[-1][0]  # (P + n, D) after the final norm: what the LM head reads
    return hidden[len(prompt_ids) :]  # (n, D)


def label_answers(
    answers: Iterable[dict],
    problems: dict[str, Problem],
    tokenizer: Any,
    model: Any,
    encode: Callable[[str], tuple[int, ...]],
    prompt_format: str,
    meta: dict,
) -> GuardDataset:
    """Label each answer by the rule and collect its hidden states; answers the rule cannot tell are skipped."""
    hidden, labels, sequence, position, shape, records = [], [], [], [], [], []
    shapes = token_shapes(tokenizer)
    skipped = 0
    for answer in answers:
        problem = problems[answer["task_id"]]
        ids = answer["token_ids"]
        finished = answer["finish_reason"] != "length"
        excess = excess_start(problem, answer["text"], prompt_format, finished)
        if excess is None or not ids:
            skipped += 1
            continue
        row_labels = token_labels(token_starts(tokenizer, ids), excess)
        index = len(records)
        records.append({
            "task_id": answer["task_id"], "split": answer["split"], "language": problem.language,
            "benchmark": problem.benchmark, "num_tokens": len(ids),
            "excess_token": row_labels.index(1) if 1 in row_labels else len(ids), "excess_char": excess,
            "finish_reason": answer["finish_reason"], "text": answer["text"],
        })
        hidden.append(answer_features(model, encode(problem.prompt), ids))
        labels.append(torch.tensor(row_labels, dtype=torch.uint8))
        sequence.append(torch.full((len(ids),), index, dtype=torch.int32))
        position.append(torch.arange(len(ids), dtype=torch.int32))
        shape.append(torch.tensor([shape_row(shapes[t]) for t in ids], dtype=torch.uint8))
    if not records:
        raise QuenchError("no answer could be labelled (no code blocks defining the entry point?)")
    log.info("labelled %d answers, skipped %d", len(records), skipped)
    meta = dict(meta, label_rule=RULE, feature=FEATURE, answers=len(records), skipped=skipped)
    return GuardDataset(
        torch.cat(hidden), torch.cat(labels), torch.cat(sequence), torch.cat(position), torch.cat(shape), records, meta
    )


def shape_row(shape: TokenShape) -> tuple[int, int, int]:
    return min(shape.newlines, 255), int(shape.head_blank), int(shape.tail_blank)


def shape_of_row(row: Sequence[int]) -> TokenShape:
    return TokenShape(int(row[0]), bool(row[1]), bool(row[2]))


def read_answers(path: Path) -> list[dict]:
    """The answers saved so far (a line cut by a kill ends the list)."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut by a kill: the rest is regenerated
    return records
