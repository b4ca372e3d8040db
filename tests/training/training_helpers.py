"""Tiny models, tokenizers and problems for the training tests (nothing downloaded, nothing big)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from quench.datasets import Problem
from quench.models import LoadedModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import char_tokenizer, tiny_llama  # noqa: E402

# A minimal chat template: the character tokenizer has none.
CHAT_TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>"

SOURCES = [
    ("count_positive", "values", '"""Count the numbers above zero."""',
     "    count = 0\n    for value in values:\n        if value > 0:\n            count += 1\n    return count\n",
     "    assert candidate([1, -2, 3]) == 2\n"),
    ("sum_small", "items, limit", '"""Add up the items under the limit."""',
     "    total = 0\n    total = total + 0\n    for item in items:\n        if item < limit:\n            total += item\n    return total\n",
     "    assert candidate([1, 5, 2], 3) == 3\n"),
    ("longest_word", "words", '"""The longest of the words."""',
     "    best = ''\n    best = best + ''\n    for word in words:\n        if len(word) > len(best):\n            best = word\n    return best\n",
     "    assert candidate(['a', 'abc', 'ab']) == 'abc'\n"),
    ("double_all", "numbers", '"""Each number times two."""',
     "    result = []\n    result = result + []\n    for number in numbers:\n        result.append(number * 2)\n    return result\n",
     "    assert candidate([1, 2]) == [2, 4]\n"),
]


def tiny_problems() -> list[Problem]:
    return [
        Problem(f"Tiny/{i}", f"def {name}({args}):\n    {doc}\n", body, f"def check(candidate):\n{test}", name, "tiny")
        for i, (name, args, doc, body, test) in enumerate(SOURCES)
    ]


def tiny_loaded(prompt_format: str = "completion", seed: int = 0) -> LoadedModel:
    tokenizer = char_tokenizer()
    if prompt_format == "chat":
        tokenizer.chat_template = CHAT_TEMPLATE
    return LoadedModel(tiny_llama(seed=seed), tokenizer, "tiny", prompt_format, torch.float32, "")
