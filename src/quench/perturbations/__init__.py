"""ReCode's perturbations (docstring, function name, code syntax, code format), seeded and validated.

`create(name)` / `names(categories)` give the transformations by ReCode name;
`perturb_problems(problems, transforms, seeds)` applies and validates them;
`read_recode(path)` / `write_set(...)` read and write ReCode's release format.
"""

from quench.perturbations.base import (
    CATEGORIES, CODE_FORMAT, CODE_SYNTAX, DOCSTRING, FUNCTION_NAME, Perturbation, apply_seeded, create, names,
    perturbation_class,
)
from quench.perturbations.pipeline import PerturbationSet, Rejection, TransformStats, perturb_problems, write_set
from quench.perturbations.recode_format import group_variants, read_recode
from quench.perturbations.validate import Verdict, validate

__all__ = [
    "CATEGORIES", "CODE_FORMAT", "CODE_SYNTAX", "DOCSTRING", "FUNCTION_NAME", "Perturbation", "PerturbationSet",
    "Rejection", "TransformStats", "Verdict", "apply_seeded", "create", "group_variants", "names",
    "perturb_problems", "perturbation_class", "read_recode", "validate", "write_set",
]
