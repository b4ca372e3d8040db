"""Building guard data: answers saved and resumed, labelled by the rule, hidden states per token."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import char_tokenizer, tiny_llama

from quench.datasets import Problem
from quench.engine.types import GenerationResult
from quench.stopping.dataset import generate_answers, label_answers

ANSWER = "```python\ndef f(x):\n    return x\n```\nok"


def problem(i: int) -> Problem:
    return Problem(task_id=f"T/{i}", prompt="def f(x):\n", canonical_solution="", test="", entry_point="f", benchmark="t")


class FakeBackend:
    """Answers every request with ANSWER (char tokens); counts what it was asked."""

    name = "fake"

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.asked: list[str] = []

    def generate(self, requests, sampling):
        for request in requests:
            self.asked.append(request.key)
            ids = tuple(self.tokenizer(ANSWER, add_special_tokens=False)["input_ids"])
            yield GenerationResult(request.key, 0, ids, ANSWER, "eos")


def test_build_resumes_labels_and_featurizes(tmp_path: Path) -> None:
    tokenizer, model = char_tokenizer(), tiny_llama()
    encode = lambda text: tuple(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    problems = [("train", problem(0)), ("validation", problem(1)), ("train", problem(2))]
    path = tmp_path / "answers.jsonl"
    backend = FakeBackend(tokenizer)
    generate_answers(problems[:2], backend, encode, 50, path)
    path.write_text(path.read_text() + '{"task_id": "T/2", "cut by a ki')  # a killed run's last line
    answers = generate_answers(problems, backend, encode, 50, path)
    assert backend.asked == ["T/0", "T/1", "T/2"]  # T/0 and T/1 were not generated again
    assert [a["task_id"] for a in answers] == ["T/0", "T/1", "T/2"]
    assert all(json.loads(line) for line in path.read_text().splitlines())

    data = label_answers(answers, {p.task_id: p for _, p in problems}, tokenizer, model, encode, "chat", {"model": "tiny"})
    n = len(ANSWER)
    assert data.hidden.shape == (3 * n, model.config.hidden_size) and len(data.records) == 3
    end = ANSWER.index("```\nok")  # the closing fence and what follows are excess
    assert data.labels[:n].tolist() == [0] * end + [1] * (n - end)
    assert data.records[1]["split"] == "validation" and data.records[0]["excess_token"] == end
    assert data.shape[ANSWER.index("\n")].tolist() == [1, 1, 1]  # a newline token
    assert data.meta["label_rule"] == "sanitized-end-v2" and data.meta["model"] == "tiny"
    assert data.records[0]["language"] == "python"
