import json

import pytest

from helpers import char_tokenizer, tiny_llama
from quench.datasets import load_humaneval
from quench.errors import InputFileError
from quench.engine import SamplingParams
from quench.engine.hf_backend import HFBackend
from quench.runs.samples import GenerateConfig, generate_samples, missing_ranges, read_samples, resume_samples


def test_missing_ranges_are_contiguous_gaps():
    assert list(missing_ranges(set(), 3)) == [(0, 3)]
    assert list(missing_ranges({0, 1, 3}, 6)) == [(2, 1), (4, 2)]
    assert list(missing_ranges({0, 1, 2}, 3)) == []


@pytest.fixture()
def setup():
    tokenizer, model = char_tokenizer(), tiny_llama()
    problems = load_humaneval()[:3]
    config = GenerateConfig(n=2, sampling=SamplingParams(max_new_tokens=16), prompt_format="completion")
    encode = lambda text: tuple(tokenizer(text[-60:], add_special_tokens=False)["input_ids"])  # noqa: E731
    return problems, HFBackend(model, tokenizer, batch_size=4), encode, config


def keyed(rows):
    return {(r.task_id, r.sample_index): (r.completion, r.raw) for r in rows}


def test_resume_after_torn_and_missing_lines_equals_uninterrupted_run(tmp_path, setup):
    problems, backend, encode, config = setup
    whole = generate_samples(problems, backend, encode, config, tmp_path / "whole.jsonl")
    assert len(whole) == 6

    lines = (tmp_path / "whole.jsonl").read_text().splitlines(keepends=True)
    killed = tmp_path / "killed.jsonl"
    killed.write_text(lines[0] + lines[2] + lines[3][:25])  # two complete lines, then a torn one
    resumed = generate_samples(problems, backend, encode, config, killed)
    on_disk = read_samples(killed)
    assert len(on_disk) == 6 and keyed(on_disk) == keyed(whole) == keyed(resumed)
    assert len({(r.task_id, r.sample_index) for r in on_disk}) == 6  # nothing twice

    again = generate_samples(problems, backend, encode, config, killed)  # all done: nothing new
    assert len(read_samples(killed)) == 6 and len(again) == 6


def test_malformed_samples_file_is_named_with_its_line(tmp_path):
    path = tmp_path / "samples.jsonl"
    path.write_text(json.dumps({"task_id": "HumanEval/0", "completion": ""}) + "\n[1, 2]\n")
    with pytest.raises(InputFileError, match=r"samples.jsonl:2: expected a JSON object"):
        read_samples(path)


def test_a_run_directorys_own_log_is_mended_only_at_its_tail(tmp_path):
    path = tmp_path / "samples.jsonl"
    first, second = (json.dumps({"task_id": f"t/{i}", "sample_index": 0, "completion": ""}) for i in range(2))
    path.write_text(first + "\n" + second)  # killed after the record, before its newline: the record stays
    assert [r.task_id for r in resume_samples(path)] == ["t/0", "t/1"]
    assert path.read_text() == first + "\n" + second + "\n"
    path.write_text(first + "\n" + second[:12])  # killed inside the record: the torn part goes
    assert [r.task_id for r in resume_samples(path)] == ["t/0"] and path.read_text() == first + "\n"
    path.write_text("{torn\n" + first + "\n")  # a bad line before the tail is not quench's to drop
    with pytest.raises(InputFileError, match=r"samples.jsonl:1: not valid JSON"):
        resume_samples(path)
    assert path.read_text() == "{torn\n" + first + "\n"


def test_reading_samples_as_input_never_writes(tmp_path):
    path = tmp_path / "samples.jsonl"
    data = json.dumps({"task_id": "t/0", "completion": ""}) + "\n" + '{"task_id": "t/1", "comp'
    path.write_text(data)
    with pytest.raises(InputFileError, match=r"samples.jsonl:2: not valid JSON .*no newline"):
        read_samples(path)
    assert path.read_text() == data
