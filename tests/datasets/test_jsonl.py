"""Reading JSONL inputs: read-only, every bad line named by `file:line`, or skipped on request."""

import gzip
import json

import pytest

from quench.datasets import load_benchmark, read_problems
from quench.datasets.problem import iter_jsonl
from quench.errors import InputFileError, QuenchError

GOOD = {"task_id": "t/0", "prompt": "def f():\n", "canonical_solution": "    return 1\n",
        "test": "def check(c):\n    assert c() == 1\n", "entry_point": "f"}


def line(row: dict) -> bytes:
    return json.dumps(row).encode() + b"\n"


def test_a_line_that_is_not_utf8_is_named_with_its_number(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_bytes(line(GOOD) + b'{"task_id": "t/1\xff\xfe"}\n')
    with pytest.raises(InputFileError, match=r"bench.jsonl:2: not UTF-8$"):
        read_problems(path)
    with pytest.raises(InputFileError, match=r"bench.jsonl:2: not UTF-8$"):
        load_benchmark(str(path))


def test_a_last_line_without_newline_is_read_and_a_torn_one_is_named(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_bytes(line(GOOD) + line({**GOOD, "task_id": "t/1"}).rstrip(b"\n"))
    assert [p.task_id for p in read_problems(path)] == ["t/0", "t/1"]
    path.write_bytes(line(GOOD) + line({**GOOD, "task_id": "t/1"})[:30])
    with pytest.raises(InputFileError, match=r"bench.jsonl:2: not valid JSON .*no newline"):
        read_problems(path)


def test_reading_never_changes_the_file(tmp_path):
    path = tmp_path / "bench.jsonl"
    data = line(GOOD) + b"\x00\x01garbage"
    path.write_bytes(data)
    path.chmod(0o444)
    with pytest.raises(InputFileError, match=r"bench.jsonl:2: not valid JSON"):
        read_problems(path)
    assert path.read_bytes() == data


def test_bad_lines_go_to_on_invalid_and_the_rest_is_read(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\xff\n[1]\n\n{"a": 2\n{"a": 3}')
    bad: list[InputFileError] = []
    rows = list(iter_jsonl(path, on_invalid=bad.append))
    assert rows == [(1, {"a": 1}), (6, {"a": 3})]  # a UTF-8 byte order mark is not part of the JSON
    assert [(e.line, e.reason.split(" (")[0]) for e in bad] == [
        (2, "not UTF-8"), (3, "expected a JSON object"), (5, "not valid JSON")]


def test_gzipped_lines_are_checked_the_same_way(tmp_path):
    path = tmp_path / "bench.jsonl.gz"
    with gzip.open(path, "wb") as f:
        f.write(line(GOOD) + b"\x80\n")
    with gzip.open(path, "rb") as lines, pytest.raises(InputFileError, match=r"bench.jsonl.gz:2: not UTF-8"):
        read_problems(path, "humaneval", lines)


def test_an_unreadable_path_is_an_error_not_a_traceback(tmp_path):
    with pytest.raises(QuenchError, match=r"cannot read"):
        list(iter_jsonl(tmp_path))
