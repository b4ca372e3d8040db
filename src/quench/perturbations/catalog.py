"""The catalog: each profile's transformations by ReCode name, written out once.

`QUENCH` and `RECODE` map every name to the class that implements it in that profile; `RECODE` takes
ReCode's own class where it differs from quench's and quench's where they agree (the model-based
two, CamelCase and synonym renaming). Importing this module is what makes a transformation known:
a class not listed here does not exist for `create`, `names` or `quench perturb --list`.
"""

from __future__ import annotations

from typing import Iterable

from quench.errors import QuenchError
from quench.perturbations.base import CATEGORIES, CATEGORY_ALIASES, RECODE_ORDER, Perturbation
from quench.perturbations.checked.code_format import (
    Doc2Comments, NewLineAfterCode, NewLineAfterDoc, NewLines, SplitLines, TabIndent,
)
from quench.perturbations.checked.code_syntax import DeadCodeInserter, DeadCodeInserterLast, ForWhileTransformer, OperandSwap
from quench.perturbations.checked.docstring import (
    ButterFingersPerturbation, ChangeCharCase, EnglishInflectionalVariation, SwapCharactersPerturbation, SynonymInsertion,
    SynonymSubstitution, TenseTransformationFuture, TenseTransformationPast, WhitespacePerturbation,
)
from quench.perturbations.checked.function_name import (
    FuncRenameButterFinger, FuncRenameCamelCase, FuncRenameChangeChar, FuncRenameInflectionalVariation,
    FuncRenameSwapChar, FuncRenameSynonymSub,
)
from quench.perturbations.checked.model_based import BackTranslation, VarRenamerCB
from quench.perturbations.checked.renaming import VarRenamerNaive, VarRenamerRN
from quench.perturbations.recode.chars import (
    RecodeButterFingers, RecodeChangeCharCase, RecodeFuncRenameButterFinger, RecodeFuncRenameChangeChar,
    RecodeFuncRenameSwapChar, RecodeSwapCharacters, RecodeWhitespace,
)
from quench.perturbations.recode.code_format import (
    RecodeDoc2Comments, RecodeNewLineAfterCode, RecodeNewLineAfterDoc, RecodeNewLines, RecodeSplitLines, RecodeTabIndent,
)
from quench.perturbations.recode.code_syntax import RecodeForWhile, RecodeOperandSwap, RecodeVarRenamerNaive, RecodeVarRenamerRN
from quench.perturbations.recode.dead_code import RecodeDeadCodeInserter, RecodeDeadCodeInserterLast
from quench.perturbations.recode.docstring import RecodeSynonymInsertion, RecodeSynonymSubstitution
from quench.perturbations.recode.inflection import RecodeEnglishInflectionalVariation, RecodeFuncRenameInflectionalVariation
from quench.perturbations.recode.tense import RecodeTenseFuture, RecodeTensePast

Catalog = dict[str, type[Perturbation]]

QUENCH: Catalog = {
    # docstring
    "BackTranslation": BackTranslation,
    "ButterFingersPerturbation": ButterFingersPerturbation,
    "ChangeCharCase": ChangeCharCase,
    "EnglishInflectionalVariation": EnglishInflectionalVariation,
    "SwapCharactersPerturbation": SwapCharactersPerturbation,
    "SynonymInsertion": SynonymInsertion,
    "SynonymSubstitution": SynonymSubstitution,
    "TenseTransformationPast": TenseTransformationPast,
    "TenseTransformationFuture": TenseTransformationFuture,
    "WhitespacePerturbation": WhitespacePerturbation,
    # function_name
    "FuncRenameCamelCase": FuncRenameCamelCase,
    "FuncRenameButterFinger": FuncRenameButterFinger,
    "FuncRenameSwapChar": FuncRenameSwapChar,
    "FuncRenameChangeChar": FuncRenameChangeChar,
    "FuncRenameInflectionalVariation": FuncRenameInflectionalVariation,
    "FuncRenameSynonymSub": FuncRenameSynonymSub,
    # code_syntax
    "DeadCodeInserter": DeadCodeInserter,
    "DeadCodeInserterLast": DeadCodeInserterLast,
    "ForWhileTransformer": ForWhileTransformer,
    "OperandSwap": OperandSwap,
    "VarRenamerCB": VarRenamerCB,
    "VarRenamerNaive": VarRenamerNaive,
    "VarRenamerRN": VarRenamerRN,
    # code_format
    "tab_indent": TabIndent,
    "split_lines": SplitLines,
    "doc2comments": Doc2Comments,
    "new_lines": NewLines,
    "new_line_aftercode": NewLineAfterCode,
    "new_line_afterdoc": NewLineAfterDoc,
}

RECODE: Catalog = {
    # docstring
    "BackTranslation": BackTranslation,
    "ButterFingersPerturbation": RecodeButterFingers,
    "ChangeCharCase": RecodeChangeCharCase,
    "EnglishInflectionalVariation": RecodeEnglishInflectionalVariation,
    "SwapCharactersPerturbation": RecodeSwapCharacters,
    "SynonymInsertion": RecodeSynonymInsertion,
    "SynonymSubstitution": RecodeSynonymSubstitution,
    "TenseTransformationPast": RecodeTensePast,
    "TenseTransformationFuture": RecodeTenseFuture,
    "WhitespacePerturbation": RecodeWhitespace,
    # function_name
    "FuncRenameCamelCase": FuncRenameCamelCase,
    "FuncRenameButterFinger": RecodeFuncRenameButterFinger,
    "FuncRenameSwapChar": RecodeFuncRenameSwapChar,
    "FuncRenameChangeChar": RecodeFuncRenameChangeChar,
    "FuncRenameInflectionalVariation": RecodeFuncRenameInflectionalVariation,
    "FuncRenameSynonymSub": FuncRenameSynonymSub,
    # code_syntax
    "DeadCodeInserter": RecodeDeadCodeInserter,
    "DeadCodeInserterLast": RecodeDeadCodeInserterLast,
    "ForWhileTransformer": RecodeForWhile,
    "OperandSwap": RecodeOperandSwap,
    "VarRenamerCB": VarRenamerCB,
    "VarRenamerNaive": RecodeVarRenamerNaive,
    "VarRenamerRN": RecodeVarRenamerRN,
    # code_format
    "tab_indent": RecodeTabIndent,
    "split_lines": RecodeSplitLines,
    "doc2comments": RecodeDoc2Comments,
    "new_lines": RecodeNewLines,
    "new_line_aftercode": RecodeNewLineAfterCode,
    "new_line_afterdoc": RecodeNewLineAfterDoc,
}

CATALOGS: dict[str, Catalog] = {"quench": QUENCH, "recode": RECODE}


def perturbation_class(name: str) -> type[Perturbation]:
    """quench's class for `name` (its category and flags hold in every profile)."""
    if name not in QUENCH:
        raise QuenchError(f"unknown perturbation {name!r}; `quench perturb --list` shows them all")
    return QUENCH[name]


def profile_class(name: str, profile: str = "quench") -> type[Perturbation]:
    """The class that implements `name` in a profile."""
    perturbation_class(name)  # the one error for an unknown name
    return CATALOGS.get(profile, QUENCH)[name]


def create(name: str, profile: str = "quench", **kwargs: object) -> Perturbation:
    """An instance by ReCode name; model-based ones accept `model=` (see `quench/model_based.py`)."""
    return profile_class(name, profile)(**kwargs)


def names(categories: Iterable[str] | None = None, include_model_based: bool = True) -> list[str]:
    """The names in ReCode's order, filtered by category (ReCode aliases accepted)."""
    wanted = None
    if categories is not None:
        wanted = set()
        for category in categories:
            if category not in CATEGORY_ALIASES:
                raise QuenchError(f"unknown category {category!r}; choose from {', '.join(CATEGORIES)}")
            wanted.add(CATEGORY_ALIASES[category])
    order = {name: i for i, name in enumerate(RECODE_ORDER)}
    return sorted(
        (name for name, cls in QUENCH.items()
         if (wanted is None or cls.category in wanted) and (include_model_based or not cls.model_based)),
        key=lambda name: (order.get(name, len(order)), name),
    )
