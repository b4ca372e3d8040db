"""quench.trusted_files: only files this user made, writable by no one else, with the recorded hash, pass."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quench.errors import QuenchError
from quench.trusted_files import UntrustedFileError, check, digest, problem, record, sidecar, tree_problems

OTHER_UID = 65534  # nobody


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    """A cache root with one built file, `tools/lib.so`, its hash recorded."""
    cache = tmp_path / "cache"
    (cache / "tools").mkdir(parents=True)
    for directory in (cache, cache / "tools"):
        directory.chmod(0o755)
    built = cache / "tools" / "lib.so"
    built.write_bytes(b"\x7fELF built by quench")
    built.chmod(0o644)
    record(built)
    return cache


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another uid needs root")


def test_a_recorded_file_is_trusted_and_its_sidecar_holds_its_hash(root: Path) -> None:
    built = root / "tools" / "lib.so"
    assert problem(built, root) is None and check(built, root) == built
    assert sidecar(built).read_text().strip() == digest(built)
    assert tree_problems(root) == []


def test_a_planted_file_without_a_recorded_hash_is_refused(root: Path) -> None:
    planted = root / "tools" / "planted.so"
    planted.write_bytes(b"payload")
    assert "no recorded hash" in str(problem(planted, root))
    with pytest.raises(UntrustedFileError) as raised:
        check(planted, root)
    assert isinstance(raised.value, QuenchError) and str(planted) in str(raised.value)
    assert tree_problems(root) == [(planted, problem(planted, root))]


def test_a_modified_file_is_refused_even_with_its_size_kept(root: Path) -> None:
    built = root / "tools" / "lib.so"
    assert problem(built, root) is None  # its digest is remembered now
    data = built.read_bytes()
    built.write_bytes(data[:-1] + b"X")
    assert "changed since it was built" in str(problem(built, root))


def test_a_group_or_world_writable_file_or_directory_is_refused(root: Path) -> None:
    built = root / "tools" / "lib.so"
    (root / "tools").chmod(0o775)
    assert "its directory" in str(problem(built, root)) and "writable by group" in str(problem(built, root))
    (root / "tools").chmod(0o755)
    root.chmod(0o757)
    assert "writable by others" in str(problem(built, root))
    root.chmod(0o755)
    built.chmod(0o666)
    assert str(problem(built, root)).startswith("is writable by group")
    built.chmod(0o644)
    assert problem(built, root) is None
    (root / "tools").chmod(0o777)
    assert any(path == root / "tools" for path, _ in tree_problems(root))


def test_a_file_or_its_sidecar_owned_by_another_uid_is_refused(root: Path) -> None:
    needs_root()
    built = root / "tools" / "lib.so"
    os.chown(built, OTHER_UID, OTHER_UID)
    assert f"owned by uid {OTHER_UID}" in str(problem(built, root))
    os.chown(built, 0, 0)
    os.chown(sidecar(built), OTHER_UID, OTHER_UID)
    assert "its recorded hash" in str(problem(built, root)) and f"uid {OTHER_UID}" in str(problem(built, root))
    os.chown(sidecar(built), 0, 0)
    os.chown(root / "tools", OTHER_UID, OTHER_UID)
    assert f"its directory {root / 'tools'} is owned by uid {OTHER_UID}" in str(problem(built, root))


def test_links_and_files_outside_the_root_are_refused(root: Path, tmp_path: Path) -> None:
    built = root / "tools" / "lib.so"
    link = root / "tools" / "link.so"
    link.symlink_to(built)
    record(built, kept_as=link)
    assert problem(link, root) == "is not a regular file"
    (root / "linked").symlink_to(root / "tools")
    assert any(path == root / "linked" for path, _ in tree_problems(root))
    outside = tmp_path / "elsewhere.so"
    outside.write_bytes(b"x")
    assert "is not under" in str(problem(outside, root))


def test_a_builders_private_scratch_is_not_read_by_others_and_is_skipped(root: Path) -> None:
    scratch = root / "tools" / "tmpbuild"
    scratch.mkdir()
    scratch.chmod(0o700)
    (scratch / "half.so").write_bytes(b"half written")
    assert tree_problems(root) == []
    assert tree_problems(root, skip_private=False) != []


def test_record_replaces_the_sidecar_atomically_and_leaves_no_temporary_file(root: Path) -> None:
    built = root / "tools" / "lib.so"
    built.write_bytes(b"rebuilt")
    assert problem(built, root) is not None
    record(built)
    assert problem(built, root) is None
    assert sorted(path.name for path in (root / "tools").iterdir()) == ["lib.so", "lib.so.sha256"]
