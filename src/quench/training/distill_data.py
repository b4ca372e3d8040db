"""Distillation data for draft models: code the target writes itself, plus real Python from the stdlib.

Two sources, both in the target's prompt format so the draft learns the contexts it will draft in:
- the target's own greedy answers to training prompts (MBPP train + validation, and signatures +
  docstrings of standard-library functions; never MBPP test or HumanEval), generated with quench's
  engine and stored as they finish (a killed run resumes);
- functions with docstrings from the installed Python standard library, framed as an answer to a
  prompt holding their signature and docstring (real code the target did not write).

An example is a token sequence and the position where its answer starts: the loss covers the answer.
"""

from __future__ import annotations

import ast
import json
import logging
import random
import sysconfig
import textwrap
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator, Sequence

from quench.datasets import Problem, load_mbpp
from quench.errors import InputFileError
from quench.models import LoadedModel, encode_prompt

log = logging.getLogger(__name__)

Progress = Callable[[int], None]  # called with the number of items just finished
TRAINING_SPLITS = ("train", "validation")  # MBPP test and HumanEval are the evaluation sets: never trained on
STDLIB_ANSWER_PREFIX = "stdlib-answer/"  # keys of the target's answers to stdlib prompts (not "stdlib/": not real code)
SAMPLED_PREFIX = "sampled"  # sampled<r>/<prompt key>: the target's r-th sampled answer to that prompt


@dataclass(frozen=True)
class Example:
    key: str
    ids: tuple[int, ...]  # prompt + answer tokens
    answer_start: int  # ids[answer_start:] is the answer (where the loss applies)

    def to_json(self) -> str:
        return json.dumps({"key": self.key, "ids": list(self.ids), "answer_start": self.answer_start})


def training_prompts(limit: int | None = None) -> list[Problem]:
    problems = [p for split in TRAINING_SPLITS for p in load_mbpp(split)]
    return problems[:limit] if limit is not None else problems


def stdlib_prompts(count: int, skip: int, seed: int = 0) -> list[Problem]:
    """`count` stdlib signatures + docstrings for the target to answer, after the `skip` used as real code.

    Both come from the same seeded shuffle (stdlib_functions), so a function is never both a
    real-code example and a prompt. Fewer than `count` when the installation has fewer functions.
    """
    if count <= 0:
        return []
    functions = stdlib_functions(skip + count, seed)[skip:]
    if len(functions) < count:
        log.warning("only %d standard-library functions left for prompts (asked for %d)", len(functions), count)
    return [Problem(STDLIB_ANSWER_PREFIX + key.removeprefix("stdlib/"), prompt, source[len(prompt) :], "",
                    key.rsplit(".", 1)[-1], "stdlib") for key, prompt, source in functions]


def sampled_problems(problems: Sequence[Problem], rounds: int) -> list[Problem]:
    """The same prompts again, once per sampling round, keyed sampled<r>/<task id> (r = 1 .. rounds)."""
    return [replace(p, task_id=f"{SAMPLED_PREFIX}{r}/{p.task_id}") for r in range(1, rounds + 1) for p in problems]


def prompt_key(key: str) -> str:
    """The key of the prompt an example answers: a sampled answer's key without its sampled<r>/ prefix."""
    head, _, rest = key.partition("/")
    return rest if head.startswith(SAMPLED_PREFIX) and head[len(SAMPLED_PREFIX) :].isdigit() else key


def read_examples(path: Path) -> list[Example]:
    if not path.is_file():
        return []
    examples = []
    with path.open() as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                examples.append(Example(record["key"], tuple(record["ids"]), int(record["answer_start"])))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                if number > 1 and not line.endswith("\n"):  # a run killed mid-write: drop the partial line
                    log.warning("%s:%d: dropping a partial last line", path, number)
                    break
                raise InputFileError(str(path), number, f"not a distillation example: {err}") from None
    return examples


def generate_answers(
    target: LoadedModel,
    problems: Sequence[Problem],
    path: Path,
    batch_size: int = 16,
    max_new_tokens: int = 128,
    progress: Progress | None = None,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[Example]:
    """The target's answers to `problems` (greedy, or sampled at `temperature` with `seed`: each answer's
    generator is seeded by its key), appended to `path` as each finishes (resumable)."""
    from quench.engine.backend import QuenchBackend
    from quench.engine.config import EngineConfig
    from quench.engine.types import GenerationRequest, SamplingParams

    done = {e.key: e for e in read_examples(path)}
    _rewrite_complete(path, done.values())
    todo = [p for p in problems if p.task_id not in done]
    if progress is not None and len(done):
        progress(len(problems) - len(todo))
    if todo:
        requests = [GenerationRequest(p.task_id, encode_prompt(target, p.prompt)) for p in todo]
        prompts = {r.key: r.prompt_ids for r in requests}
        backend = QuenchBackend(target.model, target.tokenizer, EngineConfig(batch_size=batch_size))
        sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        with path.open("a") as out:
            for result in backend.generate(requests, sampling):
                prompt = prompts[result.key]
                example = Example(result.key, prompt + tuple(result.token_ids), len(prompt))
                out.write(example.to_json() + "\n")
                out.flush()
                done[result.key] = example
                if progress is not None:
                    progress(1)
    return [done[p.task_id] for p in problems]


def _rewrite_complete(path: Path, examples: Iterator[Example] | Sequence[Example]) -> None:
    """Drop a partial last line left by a killed run, so appends start on a fresh line."""
    if path.is_file():
        path.write_text("".join(e.to_json() + "\n" for e in examples))


def stdlib_functions(limit: int, seed: int = 0, max_lines: int = 40) -> list[tuple[str, str, str]]:
    """(key, prompt, source) of top-level functions with docstrings from the standard library.

    prompt is the signature and docstring (as in HumanEval), source the whole function; test
    modules and very long functions are skipped. Deterministic for a given Python installation.
    """
    found = list(_stdlib_functions(max_lines))
    random.Random(seed).shuffle(found)
    return found[:limit]


@lru_cache(maxsize=4)
def _stdlib_functions(max_lines: int) -> tuple[tuple[str, str, str], ...]:
    """Every qualifying function of the standard library in file order (parsed once per process)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    found: list[tuple[str, str, str]] = []
    for path in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
        if "test" in path.parts[-2:][0] or path.name.startswith("test") or "site-packages" in path.parts:
            continue
        found.extend(_functions_in(path, stdlib, max_lines))
    return tuple(found)


def _functions_in(path: Path, root: Path, max_lines: int) -> list[tuple[str, str, str]]:
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    lines = text.splitlines(keepends=True)
    functions = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or ast.get_docstring(node) is None or node.decorator_list:
            continue
        if node.end_lineno is None or node.end_lineno - node.lineno >= max_lines or len(node.body) < 2:
            continue
        docstring_end = node.body[0].end_lineno
        prompt = "".join(lines[node.lineno - 1 : docstring_end])
        source = "".join(lines[node.lineno - 1 : node.end_lineno])
        key = f"stdlib/{path.relative_to(root).with_suffix('')}.{node.name}"
        functions.append((key, textwrap.dedent(prompt), textwrap.dedent(source)))
    return functions


def stdlib_examples(target: LoadedModel, limit: int, seed: int = 0, max_tokens: int = 256) -> list[Example]:
    """Stdlib functions as answers in the target's format (a fenced block in chat, the body otherwise)."""
    tokenizer = target.tokenizer
    examples = []
    for key, prompt, source in stdlib_functions(limit, seed):
        prompt_ids = encode_prompt(target, prompt)
        if target.prompt_format == "chat":
            answer = f"```python\n{source.rstrip()}\n```" + (tokenizer.eos_token or "")
        else:
            answer = source[len(prompt) :]  # a completion model continues its prompt
        answer_ids = tuple(tokenizer(answer, add_special_tokens=False)["input_ids"])
        ids = (prompt_ids + answer_ids)[:max_tokens]
        if len(ids) - len(prompt_ids) >= 8:  # keep only examples with some answer left after truncation
            examples.append(Example(key, ids, len(prompt_ids)))
    return examples


def fit_length(example: Example, max_tokens: int, min_answer: int = 64) -> Example:
    """At most `max_tokens` tokens: a long prompt loses its middle (first token kept) before the answer is cut.

    The first token stays because attention leans on it ("attention sink"); the prompt's end stays
    because the answer depends most on it; the answer keeps at least `min_answer` tokens.
    """
    prompt, answer = example.answer_start, len(example.ids) - example.answer_start
    if prompt + answer <= max_tokens:
        return example
    prompt_keep = max(max_tokens - answer, min(prompt, max_tokens - min_answer))  # >= 1 while max_tokens > min_answer
    answer_keep = max_tokens - prompt_keep
    ids = example.ids[:1] + example.ids[prompt - prompt_keep + 1 : prompt + answer_keep]
    return Example(example.key, ids, prompt_keep)
