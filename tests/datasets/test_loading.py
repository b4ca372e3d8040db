import pytest

from quench.datasets import load_benchmark, load_humaneval, load_mbpp, parse_tasks, read_problems
from quench.datasets.loading import MBPP_SPLITS, mbpp_number
from quench.errors import InputFileError, QuenchError


def test_humaneval_has_164_problems_with_tests():
    problems = load_humaneval()
    assert len(problems) == 164
    assert problems[0].task_id == "HumanEval/0" and "def check(candidate)" in problems[0].test


@pytest.mark.parametrize("split,count,first,last", [("test", 500, 11, 510), ("validation", 90, 511, 600),
                                                     ("train", 374, 601, 974), ("fewshot", 10, 1, 10)])
def test_mbpp_splits_are_the_standard_ones(split, count, first, last):
    numbers = [mbpp_number(p.task_id) for p in load_mbpp(split)]
    assert len(numbers) == count and min(numbers) == first and max(numbers) == last


def test_mbpp_splits_are_disjoint_and_cover_all():
    ids = [p.task_id for split in MBPP_SPLITS for p in load_mbpp(split)]
    assert len(ids) == len(set(ids)) == len(load_mbpp("all")) == 974


def test_task_selection_by_number_range_and_limit():
    assert parse_tasks("0,3,10-12") == ["0", "3", "10", "11", "12"]
    picked = load_benchmark("humaneval", tasks=["3", "HumanEval/1"], limit=1)
    assert [p.task_id for p in picked] == ["HumanEval/3"]


def test_unknown_task_and_split_are_named():
    with pytest.raises(QuenchError, match="HumanEval/999"):
        load_benchmark("humaneval", tasks=["999"])
    with pytest.raises(QuenchError, match="'dev'"):
        load_mbpp("dev")
    with pytest.raises(QuenchError, match="unknown benchmark 'apps'"):
        load_benchmark("apps")


def test_malformed_file_fails_with_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = '{"task_id": "t/0", "prompt": "def f():\\n", "test": "def check(c): pass", "entry_point": "f"}'
    path.write_text(good + "\n\n{not json\n")
    with pytest.raises(InputFileError, match=r"bad.jsonl:3: not valid JSON"):
        read_problems(path)
    path.write_text(good + '\n{"task_id": "t/1", "prompt": "x"}\n')
    with pytest.raises(InputFileError, match=r"bad.jsonl:2: missing .*test, entry_point"):
        read_problems(path)
    path.write_text(good + "\n" + good + "\n")
    with pytest.raises(InputFileError, match=r"bad.jsonl:2: duplicate task_id 't/0'"):
        read_problems(path)
