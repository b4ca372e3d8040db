"""`force_remove` on real trees: whatever a program built goes, and nothing outside the tree changes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from quench.execution.cleanup import force_remove, leftovers


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the tree, with a file, that links in the tree point at."""
    target = tmp_path / "outside"
    target.mkdir(mode=0o755)
    (target / "keep.txt").write_text("kept")
    return target


def deep_tree(root: Path, levels: int) -> None:
    """`levels` nested directories, built by relative steps (the full path is far over PATH_MAX)."""
    here = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=here)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
        os.close(here)
        here = below
    os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=here))
    os.fchmod(here, 0)
    os.close(here)


def test_a_tree_deeper_than_the_recursion_limit_and_path_max(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    deep_tree(tree, 3000)
    force_remove(str(tree))
    assert not tree.exists()


def test_locked_directories_and_links_go_and_their_targets_stay(tmp_path: Path, outside: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "locked" / "inner").mkdir(parents=True)
    (tree / "locked" / "inner" / "f").write_text("x")
    (tree / "to_outside").symlink_to(outside)
    (tree / "to_root").symlink_to("/")
    (tree / "loop_a").symlink_to(tree / "loop_b")
    (tree / "loop_b").symlink_to(tree / "loop_a")
    (tree / "locked" / "inner").chmod(0)
    (tree / "locked").chmod(0o500)
    tree.chmod(0o500)
    before = {path: mode(path) for path in (tmp_path, outside, Path("/"))}
    force_remove(str(tree))
    assert not tree.exists()
    assert {path: mode(path) for path in before} == before
    assert (outside / "keep.txt").read_text() == "kept"


def test_many_files(tmp_path: Path) -> None:
    tree = tmp_path / "many"
    tree.mkdir()
    for name in range(20_000):
        os.close(os.open(tree / str(name), os.O_CREAT | os.O_WRONLY, 0o600))
    force_remove(str(tree))
    assert not tree.exists()


def test_a_file_a_link_and_nothing(tmp_path: Path, outside: Path) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(outside)
    for name in ("file", "link", "missing"):
        force_remove(str(tmp_path / name))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside"]
    assert (outside / "keep.txt").exists()


def test_leftovers_names_what_is_there_but_what_is_kept(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()
    (tmp_path / "left").write_text("x")
    assert leftovers(str(tmp_path), {str(tmp_path / "kept")}) == ["left"]
    assert leftovers(str(tmp_path / "missing")) == []
