"""ReCode's perturbations (docstring, function name, code syntax, code format), seeded and validated.

`create(name)` / `names(categories)` give the transformations by ReCode name;
`perturb_problems(problems, transforms, seeds)` applies and validates them;
`read_recode(path)` / `write_set(...)` read and write ReCode's release format.

The folders: `quench/` and `recode/` hold each profile's transformations, `catalog.py` names them,
`release.py` is ReCode's file format; the rest (base, text, words, lexicon, languages, the meaning
check, the pipeline) is shared by both profiles.
"""

from quench.perturbations.base import (
    CATEGORIES, CODE_FORMAT, CODE_SYNTAX, DOCSTRING, FUNCTION_NAME, Perturbation, apply_seeded,
)
from quench.perturbations.catalog import create, names, perturbation_class
from quench.perturbations.pipeline import PerturbationSet, Rejection, TransformStats, perturb_problems, write_set
from quench.perturbations.release import group_variants, read_recode
from quench.perturbations.validate import Verdict, validate

__all__ = [
    "CATEGORIES", "CODE_FORMAT", "CODE_SYNTAX", "DOCSTRING", "FUNCTION_NAME", "Perturbation", "PerturbationSet",
    "Rejection", "TransformStats", "Verdict", "apply_seeded", "create", "group_variants", "names",
    "perturb_problems", "perturbation_class", "read_recode", "validate", "write_set",
]
