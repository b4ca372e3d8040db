"""ReCode's character-level transformations (profile "recode"), with NL-Augmenter's own draws.

NL-Augmenter reseeds its generator with the seed for every text, so ReCode's variants can be
reproduced exactly: WhitespacePerturbation (`random.seed(s)`, one draw per character, and the
only one that edits the program's names too), ButterFingers (`random.seed(s)`, a typo when
`choice(range(100)) <= 5`), ChangeCharCase (`random.seed(s)`, p=0.35 per letter), SwapCharacters (NumPy seeded with
`s + sum of the text's code points`, p=0.05 per adjacent pair). On the docstring they edit the
prose ReCode cuts out (identifiers masked); on the function name, the name, which ReCode then
replaces everywhere in the prompt by plain text substitution (the reference is left as it is).
"""

from __future__ import annotations

import random

from quench.datasets import Problem
from quench.perturbations.base import DOCSTRING, FUNCTION_NAME, Perturbation
from quench.perturbations.recode.docstring import edit_prose

KEYS = {
    "q": "qwasedzx", "w": "wqesadrfcx", "e": "ewrsfdqazxcvgt", "r": "retdgfwsxcvgt", "t": "tryfhgedcvbnju",
    "y": "ytugjhrfvbnji", "u": "uyihkjtgbnmlo", "i": "iuojlkyhnmlp", "o": "oipklujm", "p": "plo['ik",
    "a": "aqszwxwdce", "s": "swxadrfv", "d": "decsfaqgbv", "f": "fdgrvwsxyhn", "g": "gtbfhedcyjn",
    "h": "hyngjfrvkim", "j": "jhknugtblom", "k": "kjlinyhn", "l": "lokmpujn", "z": "zaxsvde",
    "x": "xzcsdbvfrewq", "c": "cxvdfzswergb", "v": "vcfbgxdertyn", "b": "bvnghcftyun", "n": "nbmhjvgtuik",
    "m": "mnkjloik", " ": " ",
}


def butter_fingers(text: str, seed: int, prob: float = 0.05) -> str:
    rng = random.Random(seed)
    out = []
    for letter in text:
        lower = letter.lower()
        new = rng.choice(KEYS[lower]) if lower in KEYS and rng.choice(range(100)) <= int(prob * 100) else lower
        out.append(new.upper() if lower != letter else new)
    return "".join(out)


def change_char_case(text: str, seed: int, prob: float = 0.35) -> str:
    rng = random.Random(seed)
    out = []
    for c in text:
        if c.isupper() and rng.random() < prob:
            out.append(c.lower())
        elif c.islower() and rng.random() < prob:
            out.append(c.upper())
        else:
            out.append(c)
    return "".join(out)


def swap_characters(text: str, seed: int, prob: float = 0.05) -> str:
    import numpy as np  # here, not at the top: the catalog imports this module for every command's --help

    if len(text) < 2:
        return text
    state = np.random.RandomState((seed + sum(ord(c) for c in text)) % 2**32)
    indices = np.argwhere(state.rand(len(text) - 1) < prob).reshape(-1)
    state.shuffle(indices)
    chars = list(text)
    for i in indices:
        if chars[i].isalnum() and chars[i + 1].isalnum():
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
    return "".join(chars)


def whitespace(text: str, seed: int, remove_prob: float = 0.1, add_prob: float = 0.05) -> str:
    """One draw per character: a whitespace character dropped, or a space added after any other."""
    rng = random.Random(seed)
    out = []
    for c in text:
        draw = rng.random()
        if c.isspace():
            out.append("" if draw < remove_prob else c)
        else:
            out.append(c + " " if draw < add_prob else c)
    return "".join(out)


def valid_name(name: str) -> str:
    """ReCode's clean-up of a perturbed name: letters, digits and underscores kept."""
    return "".join(c for c in name if c.isalnum() or c == "_")


class RecodeSeeded(Perturbation):
    """An edit `(text, seed) -> text` whose draws depend on the seed itself (not on the task):
    applied through `apply_sequence`."""

    sequential = True

    def apply(self, problem: Problem, rng: random.Random) -> Problem:
        return self.apply_seed(problem, rng.randrange(10))

    def apply_sequence(self, problems: list[Problem], seed: int) -> list[Problem]:
        return [self.apply_seed(problem, seed) for problem in problems]

    def apply_seed(self, problem: Problem, seed: int) -> Problem:
        raise NotImplementedError

    def edit(self, text: str, seed: int) -> str:
        raise NotImplementedError


class RecodeSeededProse(RecodeSeeded):
    """The edit on ReCode's docstring prose."""

    category = DOCSTRING
    masks_identifiers = True  # ReCode hides the program's names from the char-level edits but whitespace

    def apply_seed(self, problem: Problem, seed: int) -> Problem:
        return edit_prose(problem, lambda text: self.edit(text, seed), self.masks_identifiers)


class RecodeSeededName(RecodeSeeded):
    """The edit on the function name, which then replaces it everywhere in the prompt as plain text."""

    category = FUNCTION_NAME

    def apply_seed(self, problem: Problem, seed: int) -> Problem:
        name = valid_name(self.edit(problem.entry_point, seed))
        if not name or name == problem.entry_point:
            return problem
        return problem.with_changes(prompt=problem.prompt.replace(problem.entry_point, name), entry_point=name)


class RecodeButterFingers(RecodeSeededProse):
    name = "ButterFingersPerturbation"
    description = "NL-Augmenter's keyboard typos (p=0.05) on the docstring prose, its draws reproduced"
    edit = staticmethod(butter_fingers)


class RecodeChangeCharCase(RecodeSeededProse):
    name = "ChangeCharCase"
    description = "NL-Augmenter's case flips (p=0.35) on the docstring prose, its draws reproduced"
    edit = staticmethod(change_char_case)


class RecodeSwapCharacters(RecodeSeededProse):
    name = "SwapCharactersPerturbation"
    description = "NL-Augmenter's adjacent swaps (p=0.05) on the docstring prose, its draws reproduced"
    edit = staticmethod(swap_characters)


class RecodeWhitespace(RecodeSeededProse):
    name = "WhitespacePerturbation"
    description = ("NL-Augmenter's whitespace noise (a blank dropped p=0.1, a space added p=0.05) "
                   "on the docstring prose, names included")
    masks_identifiers = False
    edit = staticmethod(whitespace)


class RecodeFuncRenameButterFinger(RecodeSeededName):
    name = "FuncRenameButterFinger"
    description = "NL-Augmenter's keyboard typos (p=0.05) on the function name, replaced everywhere in the prompt"
    edit = staticmethod(butter_fingers)


class RecodeFuncRenameChangeChar(RecodeSeededName):
    name = "FuncRenameChangeChar"
    description = "NL-Augmenter's case flips (p=0.35) on the function name, replaced everywhere in the prompt"
    edit = staticmethod(change_char_case)


class RecodeFuncRenameSwapChar(RecodeSeededName):
    name = "FuncRenameSwapChar"
    description = "NL-Augmenter's adjacent swaps (p=0.05) on the function name, replaced everywhere in the prompt"
    edit = staticmethod(swap_characters)
