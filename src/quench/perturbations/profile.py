"""Perturbation profiles: quench's own transformations, or ReCode's exactly as it released them.

- `quench` (default): no solution leaks into prompts, every output compiles, variants that fail
  the meaning check are dropped; the partial split falls on a statement boundary.
- `recode`: byte-for-byte ReCode (amazon-science/recode): its partial split (every body line
  counted, cut at half), its text-level format transformations, its first-candidate code
  transformations formatted with black, NL-Augmenter's docstring semantics. Variants that fail
  the meaning check are kept, as ReCode keeps them (the check still counts them).

docs/perturbations.md lists every difference with an example.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from quench.datasets import Problem
from quench.datasets.partial import partial_problem, recode_partial_problem
from quench.errors import QuenchError


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    partial: Callable[[Problem], Problem]  # full problem -> its partial-code problem
    keep_invalid: bool  # keep variants that fail the meaning check (ReCode has no such check)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "description": self.description, "keep_invalid": self.keep_invalid}


QUENCH = Profile("quench", "quench's checked transformations (statement-boundary partial split, meaning check)",
                 partial_problem, keep_invalid=False)
RECODE = Profile("recode", "ReCode's released transformations reproduced byte for byte (its partial split, "
                 "black-formatted code syntax, NL-Augmenter docstring edits)", recode_partial_problem, keep_invalid=True)
PROFILES = {profile.name: profile for profile in (QUENCH, RECODE)}
DEFAULT_PROFILE = QUENCH.name


def resolve_profile(name: str | Profile) -> Profile:
    """The profile by name; a one-line error naming the choices otherwise."""
    if isinstance(name, Profile):
        return name
    if name not in PROFILES:
        raise QuenchError(f"--profile {name!r}: choose one of {', '.join(PROFILES)}")
    return PROFILES[name]
