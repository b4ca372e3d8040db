"""The run directory: one writer at a time, and a resumed run with other settings refused before any work."""

from __future__ import annotations

import json

import pytest

from quench.errors import QuenchError
from quench.runs import rundir


def test_a_second_writer_of_a_run_directory_is_refused_until_the_first_lets_go(tmp_path):
    rundir.lock_run_dir(tmp_path)
    try:
        with pytest.raises(QuenchError, match="another quench process is writing this run directory"):
            rundir.check_run_dir(tmp_path, {})
    finally:
        rundir.release_run_dirs()
    rundir.check_run_dir(tmp_path, {})  # released: no error


def test_changed_settings_leave_out_settings_older_runs_lack_and_what_the_run_measured():
    previous = {"model": "a", "calibration": {"base_s": 10.0}}
    assert rundir.changed_settings(previous, {"model": "a", "dtype_used": "float32"}) == []
    assert rundir.changed_settings(previous, {"model": "b"}) == ["model"]


def test_a_resumed_run_keeps_its_settings_and_overwrite_starts_it_again(tmp_path):
    rundir.prepare_run_dir(tmp_path, {"model": "a"})
    rundir.release_run_dirs()
    (tmp_path / "samples.jsonl").write_text("{}\n")
    with pytest.raises(QuenchError, match=r"holds a run with other settings \(model\); use another --out"):
        rundir.check_run_dir(tmp_path, {"model": "b"})
    rundir.check_run_dir(tmp_path, {"model": "b", "seed": 0}, overwrite=True)
    rundir.prepare_run_dir(tmp_path, {"model": "b"}, overwrite=True)
    rundir.release_run_dirs()
    assert json.loads((tmp_path / "config.json").read_text()) == {"model": "b"}
    assert not (tmp_path / "samples.jsonl").exists()


def test_an_older_run_directory_on_gguf_weights_ran_float32_kv_caches():
    """Before bfloat16 KV caches were the GGUF weights' default, those runs kept float32 ones without recording it:
    resuming one with bfloat16 caches would mix two numeric modes, so it is a changed setting; other older runs
    lack the setting and keep whatever they are given."""
    older_gguf = {"model": "a", "weights": "gguf-int8"}
    assert rundir.changed_settings(older_gguf, {**older_gguf, "kv_cache": "bfloat16"}) == ["kv_cache"]
    assert rundir.changed_settings(older_gguf, {**older_gguf, "kv_cache": "float32"}) == []
    older_dequantized = {"model": "a", "weights": "dequantized"}
    assert rundir.changed_settings(older_dequantized, {**older_dequantized, "kv_cache": "bfloat16"}) == []
    recorded = {**older_gguf, "kv_cache": "bfloat16"}
    assert rundir.with_unrecorded_settings(recorded) == recorded
