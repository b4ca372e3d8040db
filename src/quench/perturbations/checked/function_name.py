"""Function-name perturbations: the entry point renamed in the prompt, the reference and `entry_point`.

The name is replaced as a whole identifier everywhere in the prompt (signature, docstring,
`>>>` examples, helper functions) and in the reference solution (recursion); the test calls
`check(candidate)` and needs no change.
"""

from __future__ import annotations

import builtins
import functools
import keyword
import random
import re
from abc import abstractmethod

from quench.datasets import Problem
from quench.perturbations.base import FUNCTION_NAME, Perturbation
from quench.perturbations.lexicon import lexicon
from quench.perturbations.text import program_identifiers
from quench.perturbations.source import parse
from quench.perturbations.words import butter_fingers, change_case, swap_characters

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def name_words(name: str) -> list[str]:
    """`has_close_elements` and `hasCloseElements` -> [has, close, elements]."""
    return [w for w in re.split(r"_+", CAMEL_BOUNDARY.sub("_", name)) if w]


def is_snake(name: str) -> bool:
    return "_" in name.strip("_") or name.islower()


def join_like(words: list[str], original: str) -> str:
    """Join words in the style of `original` (snake_case or camelCase)."""
    if is_snake(original):
        return "_".join(words)
    return words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:])


@functools.lru_cache(maxsize=4096)
def taken_names(text: str) -> frozenset[str] | None:
    tree = parse(text)
    return None if tree is None else frozenset(program_identifiers(tree) | set(dir(builtins)))


@functools.lru_cache(maxsize=4096)
def name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.]){re.escape(name)}(?!\w)")


def rename(problem: Problem, new_name: str) -> Problem:
    """The problem with its entry point renamed everywhere it occurs as an identifier."""
    old = problem.entry_point
    if new_name == old or not IDENTIFIER.fullmatch(new_name) or keyword.iskeyword(new_name):
        return problem
    taken = taken_names(problem.prompt + problem.canonical_solution)
    test_names = taken_names(problem.test) or frozenset()  # e.g. `check`, `candidate`
    if taken is None or new_name in taken or new_name in test_names:
        return problem
    pattern = name_pattern(old)
    return problem.with_changes(
        prompt=pattern.sub(new_name, problem.prompt),
        canonical_solution=pattern.sub(new_name, problem.canonical_solution),
        entry_point=new_name,
    )


class FunctionNamePerturbation(Perturbation):
    category = FUNCTION_NAME

    def apply(self, problem: Problem, rng: random.Random) -> Problem:
        return rename(problem, self.new_name(problem.entry_point, rng))

    @abstractmethod
    def new_name(self, name: str, rng: random.Random) -> str:
        """The perturbed name (equal to `name` when nothing applies)."""


class CharacterNoise(FunctionNamePerturbation):
    """Letter-level noise; unlike ReCode, at least one edit is forced so the name always changes."""

    prob: float

    def new_name(self, name: str, rng: random.Random) -> str:
        new = self.noise(name, rng, self.prob)
        for _ in range(20):
            if new != name:
                break
            new = self.noise(name, rng, 1.0 / max(len(name), 1))
        return new if new[:1].isalpha() or new[:1] == "_" else name

    @abstractmethod
    def noise(self, name: str, rng: random.Random, prob: float) -> str: ...


class FuncRenameCamelCase(FunctionNamePerturbation):
    name = "FuncRenameCamelCase"
    description = "snake_case name to camelCase and camelCase to snake_case"
    randomized = False

    def new_name(self, name: str, rng: random.Random) -> str:
        words = name_words(name)
        if len(words) < 2:
            return name
        if is_snake(name):
            return words[0] + "".join(w[:1].upper() + w[1:] for w in words[1:])
        return "_".join(w.lower() for w in words)


class FuncRenameButterFinger(CharacterNoise):
    name = "FuncRenameButterFinger"
    description = "keyboard typos in the function name (p=0.05, at least one)"
    prob = 0.05

    def noise(self, name: str, rng: random.Random, prob: float) -> str:
        return butter_fingers(name, rng, prob)


class FuncRenameSwapChar(CharacterNoise):
    name = "FuncRenameSwapChar"
    description = "adjacent letters of the function name swapped (p=0.05, at least one)"
    prob = 0.05

    def noise(self, name: str, rng: random.Random, prob: float) -> str:
        return "_".join(swap_characters(part, rng, prob) for part in name.split("_"))


class FuncRenameChangeChar(CharacterNoise):
    name = "FuncRenameChangeChar"
    description = "letters of the function name upper-cased (p=0.35, at least one)"
    prob = 0.35

    def noise(self, name: str, rng: random.Random, prob: float) -> str:
        return change_case(name, rng, prob)


class FuncRenameInflectionalVariation(FunctionNamePerturbation):
    name = "FuncRenameInflectionalVariation"
    description = "words of the function name replaced by another inflection (sort_numbers -> sorted_number)"

    def new_name(self, name: str, rng: random.Random) -> str:
        words = name_words(name)
        new = []
        for word in words:
            reading = lexicon().analyse(word.lower()) if len(word) > 2 else None
            choice = rng.choice(lexicon().inflections(reading.lemma, reading.pos)) if reading else word.lower()
            new.append(choice if word.islower() else word)
        return join_like(new, name)


class FuncRenameSynonymSub(FunctionNamePerturbation):
    name = "FuncRenameSynonymSub"
    description = "words of the function name replaced by WordNet synonyms with p=0.5"

    def __init__(self, prob: float = 0.5) -> None:
        self.prob = prob

    def new_name(self, name: str, rng: random.Random) -> str:
        new = []
        for word in name_words(name):
            reading = lexicon().analyse(word.lower()) if len(word) > 2 else None
            options = lexicon().synonyms_of(reading) if reading else []
            if options and word.islower() and rng.random() < self.prob:
                new.extend(rng.choice(options).split())
            else:
                new.append(word)
        return join_like(new, name)
