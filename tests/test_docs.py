"""The repository's text describes the product as it is: no development-history wording, no dangling links.

Every tracked text file (`git ls-files`, binary and data files skipped) is read: docs, scripts, source and
tests alike. History lives in git, not in the files.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA_SUFFIXES = {".jsonl", ".json", ".csv", ".tsv", ".gz", ".safetensors", ".gguf", ".png", ".jpg", ".jpeg",
                 ".gif", ".svg", ".pdf", ".pt", ".bin", ".so"}
LINKED_SUFFIXES = (".md", ".png", ".svg", ".jpg", ".jpeg", ".gif")

# Wording that narrates how the code came to be rather than what it is. "stop sequences", `--stop`,
# `--draft-stop 0`, "stop 0.15" and "stop rule" are product terms and do not match.
HISTORY = {
    "a numbered stop (Stop N, stops N-M)": re.compile(r"(?<![-\w])[Ss]tops? \d+(?![.\d])"),
    "a numbered stop (stop-N)": re.compile(r"\b[Ss]top-\d+\b"),
    "a numbered stop in a file name (-stopN)": re.compile(r"-stop\d+"),
    "wording relative to the machine a figure was measured on": re.compile(r"\bthis\s+host\b", re.IGNORECASE),
    "a reference to a design document that does not exist": re.compile(r"\bdesign\.md\b"),
}
MARKDOWN_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# A repository path to a doc or figure, written anywhere (a docstring, a comment, a doc's prose).
DOCS_PATH = re.compile(r"(?<![\w./-])(docs/[\w./-]+?\.(?:md|png|svg|jpe?g|gif))\b")


def tracked_text_files() -> list[Path]:
    """The tracked files of the checkout that are text (UTF-8, no NUL byte) and not data."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = []
    for name in filter(None, listing.decode().split("\0")):
        path = ROOT / name
        if path.suffix.lower() in DATA_SUFFIXES or not path.is_file():
            continue
        raw = path.read_bytes()
        if b"\0" in raw:
            continue
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        files.append(path)
    return files


def history_wording(text: str) -> list[str]:
    """Each line of `text` with process-history wording, as 'line N: what (the line)'."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for what, pattern in HISTORY.items():
            if pattern.search(line):
                found.append(f"line {number}: {what}: {line.strip()[:120]}")
    return found


def dangling_links(path: Path, text: str) -> list[str]:
    """Links from `path` to docs or images that do not exist: Markdown links (relative to the file) and
    `docs/...` paths written anywhere (relative to the repository root)."""
    targets: list[tuple[str, Path]] = []
    if path.suffix == ".md":
        for match in MARKDOWN_LINK.finditer(text):
            target = match.group(1).split("#", 1)[0]
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # an anchor, a URL, mailto:
                continue
            targets.append((match.group(1), (path.parent / target)))
    for match in DOCS_PATH.finditer(text):
        targets.append((match.group(1), ROOT / match.group(1)))
    return [f"{shown} -> {resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved}"
            for shown, resolved in targets
            if not resolved.exists() and (shown.endswith(LINKED_SUFFIXES) or path.suffix == ".md")]


def test_no_process_history_in_tracked_files() -> None:
    problems = {}
    for path in tracked_text_files():
        found = history_wording(path.read_text(encoding="utf-8"))
        if found:
            problems[str(path.relative_to(ROOT))] = found
    assert not problems, "process history in tracked files:\n" + "\n".join(
        f"{name}: {line}" for name, lines in problems.items() for line in lines)


def test_no_dangling_links_in_tracked_files() -> None:
    problems = {}
    for path in tracked_text_files():
        missing = dangling_links(path, path.read_text(encoding="utf-8"))
        if missing:
            problems[str(path.relative_to(ROOT))] = missing
    assert not problems, "links to missing files:\n" + "\n".join(
        f"{name}: {link}" for name, links in problems.items() for link in links)


# The examples split their flagged words into adjacent literals: this file is scanned too.
@pytest.mark.parametrize("line, flagged", [
    ("Stop" " 18: what a verification step costs", True),
    ("measured over stops" " 15-16", True),
    ("the stop" "-12 rule applies instead", True),
    ("figure generation-" "stop17.png", True),
    ("on this" " host a plain read ran at 9.5 GB/s", True),
    ("the harnesses' stop sequences (design" ".md section 2)", True),
    ("generation stops at the stop sequences", False),
    ("`--stop` adds a stop sequence; the stop rule ends a row", False),
    ("`--draft-stop 0` turns the cumulative stop off", False),
    ("a cumulative stop (0.15 at batch 1): stop 0.15 against no rule", False),
    ("the host's memory bandwidth", False),
])
def test_history_patterns_flag_process_wording_only(line: str, flagged: bool) -> None:
    assert bool(history_wording(line)) is flagged


def test_dangling_links_are_found() -> None:
    doc = ROOT / "docs" / "a-doc-under-test.md"
    text = ("[engine](engine.md) ![plot](figures/none-such.png) [site](https://example.org/x.md) "
            "[here](#section) and docs" "/missing-doc.md")
    missing = ["figures/none-such.png -> docs" "/figures/none-such.png",
               "docs" "/missing-doc.md -> docs" "/missing-doc.md"]
    assert dangling_links(doc, text) == missing
