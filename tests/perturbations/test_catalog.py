"""The catalog names every transformation of each profile, and the perturbation modules import one another
without a circle (the scan reads every import, function-level ones included)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

from helpers import find_cycle
import quench.perturbations
from quench.errors import QuenchError
from quench.perturbations import catalog
from quench.perturbations.base import CATEGORIES, RECODE_ORDER, Perturbation

PACKAGE = "quench.perturbations"
FOLDERS = {"quench": "checked", "recode": "recode"}  # profile -> the folder of its transformations
ROOT = Path(quench.perturbations.__file__).parent


def module_names() -> list[str]:
    return [PACKAGE] + [info.name for info in pkgutil.walk_packages([str(ROOT)], PACKAGE + ".")]


def module_path(module: str) -> Path | None:
    relative = Path(*module.split(".")[2:])
    for path in (ROOT / relative / "__init__.py", (ROOT / relative).with_suffix(".py")):
        if path.is_file():
            return path
    return None


def imports_of(module: str) -> set[str]:
    """The quench.perturbations modules that `module` imports: `from a import b` counts as `a.b` where that is a
    module, as `a` otherwise."""
    path = module_path(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if module_path(f"{base}.{alias.name}") else base)
    return {name for name in found if (name == PACKAGE or name.startswith(PACKAGE + ".")) and module_path(name)}


def import_graph() -> dict[str, set[str]]:
    return {module: imports_of(module) - {module} for module in module_names()}


def test_the_perturbation_modules_import_one_another_without_a_circle():
    graph = import_graph()
    assert f"{PACKAGE}.catalog" in graph[f"{PACKAGE}.release"]  # the scan sees real imports
    assert f"{PACKAGE}.checked.tense" in graph[f"{PACKAGE}.checked.docstring"]  # `from package import module`
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check can see one
    assert find_cycle(graph) is None


def test_a_profile_folder_imports_the_shared_modules_never_the_other_profile():
    graph = import_graph()
    for profile, other in (("quench", "recode"), ("recode", "quench")):
        for module, imported in graph.items():
            if module.startswith(f"{PACKAGE}.{FOLDERS[profile]}."):
                assert not {m for m in imported if m.startswith(f"{PACKAGE}.{FOLDERS[other]}")}, module
    # the shared modules below the catalog import no profile
    for shared in ("base", "text", "words", "lexicon", "source", "marker", "meaning", "profile"):
        assert not {m for m in graph[f"{PACKAGE}.{shared}"] if m.startswith((f"{PACKAGE}.checked", f"{PACKAGE}.recode"))}


@pytest.mark.parametrize("profile", sorted(catalog.CATALOGS))
def test_each_profile_names_every_transformation_once_under_its_own_name(profile: str):
    entries = catalog.CATALOGS[profile]
    assert sorted(entries) == sorted(RECODE_ORDER)
    for name, cls in entries.items():
        assert cls.name == name and cls.category in CATEGORIES
        assert cls.category == catalog.QUENCH[name].category
        assert cls.model_based == catalog.QUENCH[name].model_based
        assert catalog.profile_class(name, profile) is cls


@pytest.mark.parametrize("profile", sorted(catalog.CATALOGS))
def test_every_transformation_class_in_a_profile_folder_is_in_its_catalog(profile: str):
    """A class written but left out of the catalog would silently not exist: none is."""
    folder = importlib.import_module(f"{PACKAGE}.{FOLDERS[profile]}")
    defined = set()
    for info in pkgutil.iter_modules(folder.__path__, folder.__name__ + "."):
        module = importlib.import_module(info.name)
        defined |= {cls for _, cls in inspect.getmembers(module, inspect.isclass)
                    if issubclass(cls, Perturbation) and cls.__module__ == module.__name__ and "name" in vars(cls)}
    listed = {cls for cls in catalog.CATALOGS[profile].values() if cls.__module__.startswith(folder.__name__ + ".")}
    assert defined == listed


def test_names_filters_by_category_in_recode_order_and_unknown_names_fail_in_one_line():
    assert catalog.names() == list(RECODE_ORDER)
    assert catalog.names(["format"]) == ["tab_indent", "split_lines", "doc2comments", "new_lines",
                                         "new_line_aftercode", "new_line_afterdoc"]
    assert "BackTranslation" not in catalog.names(include_model_based=False)
    assert type(catalog.create("OperandSwap", "recode")).__name__ == "RecodeOperandSwap"
    assert type(catalog.create("FuncRenameCamelCase", "recode")) is catalog.QUENCH["FuncRenameCamelCase"]
    with pytest.raises(QuenchError, match="unknown perturbation 'NoSuch'"):
        catalog.create("NoSuch")
    with pytest.raises(QuenchError, match="unknown category"):
        catalog.names(["nosuch"])
