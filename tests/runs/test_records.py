"""The records of samples.jsonl and results.jsonl: written as before, read back to the same line, strict on types.

Each expected line below is what quench wrote for the same input before the records were typed (its
dict writers at commit d7128c1), key order included.
"""

import json
from pathlib import Path

import pytest

from quench.datasets import load_humaneval
from quench.engine.types import GenerationResult
from quench.errors import InputFileError
from quench.execution.outcomes import ExecutionResult, Outcome
from quench.execution.plus import PlusResult
from quench.runs.evaluate import read_results, result_records
from quench.runs.records import ExecutionKey, ResultRecord, SampleRecord
from quench.runs.samples import read_samples, sample_record

RUN_DIRS = Path(__file__).parent / "fixtures" / "run_dirs"
ADD = next(p for p in load_humaneval() if p.task_id == "HumanEval/53")
CHAT_TEXT = "```python\ndef add(x: int, y: int):\n    return x + y\n```\nprint(add(1, 2))"
CODE = "def add(x: int, y: int):\n    return x + y\n"


def line(record: SampleRecord | ResultRecord) -> str:
    return json.dumps(record.to_json())


def test_a_generated_sample_is_written_as_before():
    result = GenerationResult("HumanEval/53", 3, (1, 2, 3), CHAT_TEXT, "eos", 0.123456,
                              {"finish_s": 0.5, "steps": 3.0, "drafted": 4.0, "accepted": 2.0})
    record = sample_record(ADD, result, "chat")
    assert line(record) == json.dumps({
        "task_id": "HumanEval/53", "sample_index": 3, "completion": CODE, "solution": "\n\n" + CODE, "raw": CHAT_TEXT,
        "finish_reason": "eos", "num_tokens": 3, "seconds": 0.1235, "finish_s": 0.5, "steps": 3.0, "drafted": 4.0,
        "accepted": 2.0})
    labelled = SampleRecord.from_json({**record.to_json(), "variant": "tab_indent/1", "prompt_id": "0123456789abcdef0123"})
    assert line(labelled) == line(record)[:-1] + ', "variant": "tab_indent/1", "prompt_id": "0123456789abcdef0123"}'
    assert labelled.generation_key == ("0123456789abcdef0123", 3) and record.generation_key == ("HumanEval/53", 3)


def test_a_served_sample_counts_the_servers_tokens_as_before():
    result = GenerationResult("HumanEval/53", 0, (), "    return x + y\n", "stop", 2.0,
                              {"completion_tokens": 7.0, "server_model": "m"})
    assert line(sample_record(ADD, result, "completion")) == json.dumps({
        "task_id": "HumanEval/53", "sample_index": 0, "completion": "    return x + y\n", "solution": "",
        "raw": "    return x + y\n", "finish_reason": "stop", "num_tokens": 7, "seconds": 2.0,
        "completion_tokens": 7.0, "server_model": "m"})


def test_results_are_written_as_before():
    timeout = ExecutionResult(Outcome.timeout, "x" * 600, 5.123456, flaky_timeout=True)
    key = ExecutionKey("HumanEval/53", "", 3, "p")
    assert line(ResultRecord.of(key, timeout)) == json.dumps({
        "task_id": "HumanEval/53", "variant": "", "sample_index": 3, "program_id": "p", "outcome": "timeout",
        "passed": False, "detail": "x" * 500, "seconds": 5.1235, "flaky_timeout": True})
    plus = PlusResult(ExecutionResult(Outcome.passed, "", 0.5), ExecutionResult(Outcome.failed, "AssertionError", 0.75))
    assert line(ResultRecord.of(ExecutionKey(program_id="q"), plus)) == json.dumps({
        "program_id": "q", "outcome": "passed", "passed": True, "detail": "AssertionError", "seconds": 0.75,
        "outcome_plus": "failed", "passed_plus": False})
    assert ResultRecord.of(ExecutionKey("t", None, 0, "p"), ExecutionResult(Outcome.passed)).to_json() == {
        "task_id": "t", "sample_index": 0, "program_id": "p", "outcome": "passed", "passed": True, "detail": "",
        "seconds": 0.0}


@pytest.mark.parametrize("path", ["run/samples.jsonl", "robustness/samples.jsonl"])
def test_every_sample_line_quench_wrote_reads_back_to_the_same_line(path):
    for text in (RUN_DIRS / path).read_text(encoding="utf-8").splitlines():
        assert line(SampleRecord.from_json(json.loads(text))) == text


@pytest.mark.parametrize("path", ["run/results.jsonl", "robustness/executions.jsonl"])
def test_every_result_line_quench_wrote_reads_back_to_the_same_line(path):
    for text in (RUN_DIRS / path).read_text(encoding="utf-8").splitlines():
        assert line(ResultRecord.from_json(json.loads(text))) == text


@pytest.mark.parametrize("text", [
    # a time-budget run's line for a problem where no sample finished in time
    '{"task_id": "t/0", "sample_index": 0, "completion": "", "solution": "", "raw": "", "finish_reason": "budget", '
    '"num_tokens": 0, "finish_s": null}',
    # fields of another version, or another tool, among quench's: kept in place
    '{"task_id": "t/0", "sample_index": 1, "completion": "x", "solution": "", "raw": "x", "finish_reason": "stop", '
    '"num_tokens": 1, "seconds": 0.5, "later": {"nested": [1, 2]}, "variant": "nominal/full", "prompt_id": "abc"}',
])
def test_other_sample_lines_read_back_to_the_same_line(text):
    assert line(SampleRecord.from_json(json.loads(text))) == text


def test_an_unknown_result_field_is_kept_and_the_finish_time_read():
    text = '{"task_id": "t", "sample_index": 0, "outcome": "failed", "passed": false, "detail": "", "seconds": 0.1, "later": 1}'
    record = ResultRecord.from_json(json.loads(text))
    assert line(record) == text and record.extra == {"later": 1} and record.outcome is Outcome.failed
    assert SampleRecord("t", 0, "", extra={"finish_s": None}).finish_s is None
    assert SampleRecord("t", 0, "", extra={"finish_s": 1.25}).finish_s == 1.25


@pytest.mark.parametrize("row, message", [
    ({"task_id": "t", "sample_index": "0", "completion": ""}, "field sample_index must be int"),
    ({"task_id": "t", "sample_index": True, "completion": ""}, "field sample_index must be int"),
    ({"task_id": ["t"], "sample_index": 0, "completion": ""}, "field task_id must be str or int"),
    ({"task_id": "t", "sample_index": 0, "completion": "", "variant": 3}, "field variant must be str"),
    ({"task_id": "t", "sample_index": 0, "completion": "", "num_tokens": 1.5}, "field num_tokens must be int"),
    ({"task_id": "t", "completion": ""}, "missing field"),
    ({"task_id": None, "sample_index": 0, "completion": ""}, "missing field"),
    ({"task_id": "t", "sample_index": None, "completion": ""}, "missing field"),
])
def test_a_sample_field_of_the_wrong_type_is_named(row, message):
    with pytest.raises(ValueError, match=message):
        SampleRecord.from_json(row)


@pytest.mark.parametrize("row, message", [
    ({"outcome": "passed"}, "missing field"),
    ({"outcome": "passed", "passed": None}, "missing field"),
    ({"passed": True}, "missing field"),
    ({"outcome": "exploded", "passed": False}, "unknown outcome 'exploded'"),
    ({"outcome": "passed", "passed": 1}, "field passed must be bool"),
    ({"outcome": "passed", "passed": True, "outcome_plus": "nope", "passed_plus": False}, "unknown outcome 'nope'"),
])
def test_a_result_field_of_the_wrong_type_is_named(row, message):
    with pytest.raises(ValueError, match=message):
        ResultRecord.from_json(row)


def test_a_numeric_task_id_reads_as_text_and_a_null_optional_field_as_absent():
    assert SampleRecord.from_json({"task_id": 11, "sample_index": 0, "completion": ""}).task_id == "11"
    record = SampleRecord.from_json({"task_id": "t", "sample_index": 0, "completion": "", "raw": None, "variant": None})
    assert record.raw is None and record.variant is None and record.to_json() == {
        "task_id": "t", "sample_index": 0, "completion": "", "solution": ""}


def test_a_bad_line_in_an_input_or_a_run_directory_names_its_file_and_line(tmp_path):
    samples = tmp_path / "samples.jsonl"
    samples.write_text('{"task_id": "t", "completion": ""}\n{"task_id": "t", "sample_index": "1", "completion": ""}\n')
    with pytest.raises(InputFileError, match=r"samples.jsonl:2: field sample_index must be int"):
        read_samples(samples)
    results = tmp_path / "results.jsonl"
    results.write_text('{"task_id": "t", "sample_index": 0, "outcome": "passed", "passed": true}\n\n'
                       '{"task_id": "t", "sample_index": 1, "outcome": "later", "passed": true}\n')
    with pytest.raises(InputFileError, match=r"results.jsonl:3: field outcome: unknown outcome 'later'"):
        read_results(results)
    assert result_records(tmp_path / "absent.jsonl", ("outcome",)) == []


def test_a_resumed_run_matches_results_on_the_fields_its_jobs_set():
    on_disk = ExecutionKey("t", "nominal/full", 0, "p")
    plain = ExecutionKey("t", None, 0, "p")  # a file without variants: the variant on disk does not count
    assert on_disk.within(plain) == plain
    with_variants = ExecutionKey("t", "", 0, "p")  # a file with variants: "" is a plain sample's
    assert on_disk.within(with_variants) != with_variants
    assert on_disk.within(ExecutionKey(program_id="p")) == ExecutionKey(program_id="p")
