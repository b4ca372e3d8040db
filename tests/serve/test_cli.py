"""`quench serve` as a command: bad flags before the model loads; SIGTERM lets in-flight requests finish."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from helpers import save_tiny_model
from quench.cli.main import main


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("serve") / "tiny")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("flags, words", [
    (["--port", "70000"], "--port must be in 0..65535"),
    (["--backend", "hf"], "unrecognized argument: --backend"),  # serve runs quench's own engine only
    (["--max-model-len", "1"], "--max-model-len must be at least 2"),
    (["--max-waiting", "0"], "--max-waiting must be at least 1"),
    (["--prefill-share", "0"], "--prefill-share must be > 0"),
    (["--engine-loop", "fiber"], "--engine-loop"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--model", "no-such-model"], "no-such-model"),
    (["--replicas", "2"], "need --ray ADDRESS"),
    (["--engines", "2"], "unrecognized argument: --engines"),  # one engine per process
    (["--ray", "auto", "--replicas", "0"], "--replicas must be at least 1"),
    (["--ray", "auto", "--cpus-per-replica", "0"], "--cpus-per-replica must be > 0"),
])
def test_bad_flags_are_one_line_errors_with_exit_code_2(flags, words, capsys) -> None:
    try:
        code = main(["serve", *flags])
    except SystemExit as done:  # a flag serve does not have: argparse's error
        code = done.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and words in err


def test_ray_without_ray_serve_is_one_line_naming_the_extra(capsys) -> None:
    try:
        import ray.serve  # noqa: F401
        pytest.skip("Ray Serve is installed")
    except ImportError:
        pass
    assert main(["serve", "--ray", "auto", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --ray: ") and "quench-code[serve-ray]" in err


def test_a_port_in_use_is_refused_before_the_model_loads(capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        assert main(["serve", "--port", str(port)]) == 2
    assert "address already in use" in capsys.readouterr().err
    assert time.monotonic() - started < 5  # the default model was not loaded


def test_a_context_past_the_models_position_limit_is_refused(tiny_dir: Path, capsys) -> None:
    assert main(["--threads", "1", "serve", "--model", str(tiny_dir), "--port", str(free_port()),
                 "--max-model-len", "5000"]) == 2
    assert "--max-model-len 5000 is past the model's position limit of 4096" in capsys.readouterr().err


@pytest.mark.slow
def test_sigterm_finishes_in_flight_requests_then_exits(tiny_dir: Path) -> None:
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "quench.cli.main", "--threads", "1", "serve", "--model", str(tiny_dir),
               "--served-model-name", "tiny", "--port", str(port), "--max-model-len", "1024"]
    server = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, server.stderr.read()
            assert time.monotonic() < deadline, "the server did not come up"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        lines: list[str] = []
        first = threading.Event()

        def read_stream() -> None:
            body = {"model": "tiny", "prompt": "x = [1, 2, 3]\nfor", "max_tokens": 600, "temperature": 0,
                    "stream": True}
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as response:
                for line in response.iter_lines():
                    if line:
                        lines.append(line)
                        first.set()

        reader = threading.Thread(target=read_stream)
        reader.start()
        assert first.wait(60)
        server.send_signal(signal.SIGTERM)
        reader.join(60)
        assert server.wait(60) in (0, -signal.SIGTERM)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert lines[-1] == "data: [DONE]"  # the request in flight finished
    reasons = [json.loads(line[6:])["choices"][0]["finish_reason"] for line in lines[:-1]]
    assert reasons[-1] in ("length", "stop") and reasons.count(None) == len(reasons) - 1
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/health", timeout=2)


@pytest.mark.parametrize("flags, drafter, sampled_steps_draft", [
    (["--weights", "dequantized"], "hybrid", False),  # the preset ships a draft: greedy steps draft with it
    (["--model", "tiny-dir"], "ngram", False),  # no draft shipped: prompt lookup
    (["--weights", "gguf-int8"], "ngram", False),  # steps too short for a draft model to pay: prompt lookup
    (["--speculate", "none"], "none", True),
    (["--speculate", "ngram"], "ngram", True),  # asked for: sampled steps draft too, as in a batch run
])
def test_speculation_defaults_to_greedy_steps_only(flags, drafter, sampled_steps_draft, tiny_dir) -> None:
    from quench.cli.parser import build_parser
    from quench.cli.serve import serving_options

    flags = [str(tiny_dir) if flag == "tiny-dir" else flag for flag in flags]
    args = build_parser(["serve"]).parse_args(["serve", *flags])
    engine = serving_options(args).engine
    assert (engine.drafter, engine.draft_sampled) == (drafter, sampled_steps_draft)
