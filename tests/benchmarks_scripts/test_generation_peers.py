"""benchmarks/generation.py's peers: each is skipped with a line saying so where its environment is not given (CI
installs none), a wrong path is an `error:` line and exit 2 before anything loads, and the side-by-side table says
"decode only" or "–" where a peer cannot run a cell."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
ENVIRONMENTS = ("QUENCH_VLLM_PYTHON", "QUENCH_OPENVINO_PYTHON", "QUENCH_LLAMACPP_PYTHON", "QUENCH_LLAMA_BIN")
# llama-batched-bench's JSON line for 8 sequences of 160-token prompts and 32 new tokens
BATCHED_BENCH_LINE = ('{"n_kv_max": 4096, "n_batch": 2048, "n_ubatch": 512, "flash_attn": -1, "is_pp_shared": 0, '
                      '"n_gpu_layers": -1, "n_threads": 1, "n_threads_batch": 1, "pp": 160, "tg": 32, "pl": 8, '
                      '"n_kv": 1536, "t_pp": 25.2358, "speed_pp": 50.721596, "t_tg": 7.280685, "speed_tg": 35.161526, '
                      '"t": 32.516483, "speed": 47.237579}')


def load_script(name: str) -> ModuleType:
    sys.path.append(str(BENCHMARKS))  # the script's siblings (peer_backends, vllm_client), after every library
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generation() -> ModuleType:
    environ = dict(os.environ)
    module = load_script("generation")  # sets quench's OpenMP wait for this process, as the script does
    yield module
    os.environ.clear()
    os.environ.update(environ)
    sys.modules.pop(module.__name__, None)
    sys.path.remove(str(BENCHMARKS))


def test_quench_runs_under_the_clis_openmp_wait_and_the_peers_under_their_own(
        generation: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import peer_client

    from quench.threads import prepare_openmp

    expected: dict[str, str] = {}
    prepare_openmp(expected)
    assert peer_client.QUENCH_ONLY <= set(expected)
    assert all(os.environ[name] == expected[name] for name in peer_client.QUENCH_ONLY)
    monkeypatch.setattr(peer_client, "QUENCH_ONLY", {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"})
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("GOMP_SPINCOUNT", "1000")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    peer = peer_client.peer_environment()
    assert "OMP_WAIT_POLICY" not in peer and "GOMP_SPINCOUNT" not in peer and peer["OMP_NUM_THREADS"] == "2"


def arguments(generation: ModuleType, *extra: str) -> argparse.Namespace:
    """What main() parses, without the environment's peers, checked as main() checks them."""
    args = argparse.Namespace(vllm_python=None, openvino_python=None, llamacpp_python=None, llama_bin=None, gguf=None,
                              ttft_prompts=1, ttft_alone_calls=5,
                              backends=["quench-defaults", "vllm", "openvino", "llamacpp"])
    for flag, value in zip(extra[::2], extra[1::2]):
        setattr(args, flag.lstrip("-").replace("-", "_"), value)
    generation.check_arguments(args)
    return args


def test_each_peer_without_its_environment_is_skipped_with_a_line(generation) -> None:
    args = arguments(generation)
    lines = generation.resolve_peers(args)
    assert args.backends == ["quench-defaults"]
    assert [line.split(":")[0] for line in lines] == ["vllm", "openvino", "llamacpp"]
    assert all("skipped" in line for line in lines)
    assert "--openvino-python" in lines[1] and "--llama-bin" in lines[2]


def test_a_given_peer_joins_the_run_and_llamacpp_says_which_half_it_lacks(generation, tmp_path) -> None:
    (tmp_path / "llama-batched-bench").write_text("")
    args = arguments(generation, "--openvino-python", sys.executable, "--llama-bin", str(tmp_path))
    args.backends = ["quench-defaults"]
    lines = generation.resolve_peers(args)
    assert args.backends == ["quench-defaults", "openvino", "llamacpp"]
    assert lines == [line for line in lines if line.startswith("llamacpp: batch 1 skipped")]


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--openvino-python", "/no/such/python", "--openvino-python: /no/such/python is not an executable file"),
    ("--llamacpp-python", "/no/such/python", "--llamacpp-python: /no/such/python is not an executable file"),
    ("--llama-bin", "/no/such/dir", "--llama-bin: /no/such/dir holds no llama-batched-bench"),
    ("--gguf", Path("/no/such.gguf"), "--gguf: /no/such.gguf is not a file"),
    ("--ttft-alone-calls", 0, "--ttft-alone-calls: must be at least 1, got 0"),
])
def test_a_wrong_peer_path_names_the_flag(generation, flag, value, message) -> None:
    with pytest.raises(ValueError, match=message):
        arguments(generation, flag, value)


def test_the_script_refuses_a_wrong_peer_path_with_exit_2_before_loading(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENTS}
    env["PYTHONPATH"] = str(BENCHMARKS.parent / "src")
    done = subprocess.run([sys.executable, str(BENCHMARKS / "generation.py"), "--openvino-python", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (f"error: --openvino-python: {tmp_path} is not an executable file "
                                                    "(the openvino-genai environment's python)")
    assert "torch threads" not in done.stdout  # nothing ran


def test_llamacpp_is_built_only_at_batch_1(generation) -> None:
    setup = generation.PeerSetup(Path("model.gguf"), llamacpp_python=None, llama_bin=Path("bin"))
    loaded = SimpleNamespace(model=None, tokenizer=None, source=None)
    assert generation.make_backends(loaded, None, 8, ["llamacpp"], 7, peers=setup) == {}  # no batch in its Python API
    assert generation.make_backends(loaded, None, 1, ["llamacpp"], 7, peers=setup) == {}  # and no Python API here


def test_batched_bench_runs_the_cell_it_is_asked_for(generation) -> None:
    peers = sys.modules["peer_backends"]
    command = peers.batched_bench_command(Path("bin/llama-batched-bench"), Path("m.gguf"), 2, 8, 160, 128)
    flags = dict(zip(command[1::2], command[2::2]))
    assert (flags["-t"], flags["-tb"], flags["-npl"], flags["-npp"], flags["-ntg"]) == ("2", "2", "8", "160", "128")
    assert int(flags["-c"]) >= 8 * (160 + 128)  # every sequence's positions fit
    row = peers.parse_batched_bench("build info\n" + BATCHED_BENCH_LINE + "\n", 8, 160, 32)
    assert row == peers.DecodeOnly(8, 160, 32, 35.161526, 50.721596)


def measurement(generation: ModuleType, backend: str, mode: str, batch: int, walls: list[float], **extra):
    m = generation.Measurement(backend, mode, batch, batch, 128 * batch, 1.0, 1.0, 1.0, walls[0], 1.0, 1.0, 0.0, **extra)
    m.wall_rounds = walls
    return m


def test_the_side_by_side_table_marks_what_a_peer_cannot_run(generation) -> None:
    peers = sys.modules["peer_backends"]
    rows = [
        measurement(generation, "quench-defaults", "greedy", 1, [40.0, 44.0], ttft_ms=300.0, ttft_alone_ms=100.0),
        measurement(generation, "openvino", "greedy", 1, [38.0, 30.0], ttft_ms=200.0, ttft_alone_ms=150.0),
        measurement(generation, "llamacpp", "greedy", 1, [50.0, 55.0], ttft_ms=1000.0, ttft_alone_ms=900.0),
        measurement(generation, "quench-defaults", "greedy", 8, [200.0]),
        measurement(generation, "openvino", "greedy", 8, [100.0]),
        measurement(generation, "quench-defaults", "sampling", 8, [240.0]),
        measurement(generation, "openvino", "sampling", 8, [120.0]),
    ]
    table = peers.peer_table(rows, {8: peers.DecodeOnly(8, 160, 128, 80.0, 300.0)}, threads=1).splitlines()
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")[1:]] for line in table[2:]}
    assert table[0].split("|")[2:5] == [" quench-defaults ", " openvino ", " llamacpp "]
    assert cells["greedy, batch 1"] == ["44.0", "38.0", "55.0", "0.80x"]  # the best round of each; the fastest peer
    assert cells["greedy, batch 8"] == ["200.0", "100.0", "80.0 decode only", "2.00x"]  # not against decode only
    assert cells["sampling, batch 8"] == ["240.0", "120.0", "–", "2.00x"]
    assert cells["first token alone (ms)"] == ["100", "150", "900", "1.50x"]
    assert cells["first token, alternating rounds (ms)"] == ["300", "200", "1000", "0.67x"]
