"""One answer on every CPU: the greedy tokens of `golden_tokens.json` (written once by golden_tokens.py --write;
never regenerated to make this pass: a difference is a bug), checked at this machine's own kernel level and, with
QUENCH_GOLDEN_LEVELS=below (`.ci/run`) at every lower x86 level it can execute, with PyTorch held to the same ISA
(`all`: both).
The aarch64 levels are held to the same arithmetic by the C self-test's digests under qemu-user
(test_native_cross.py, against golden_digests.json)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from quench.native_target import current_target, this_cpu_levels

HERE = Path(__file__).parent
GOLDEN = json.loads((HERE / "golden_tokens.json").read_text())
# PyTorch's own kernels held to the level's ISA (ATen's dispatch, oneDNN's), so nothing of a higher level computes
TORCH_ISA = {
    "x86-64-v2": ("default", "SSE41"),
    "x86-64-v3": ("avx2", "AVX2"),
    "x86-64-v4": ("avx512", "AVX512_CORE"),
    "x86-64-v4-bf16": ("avx512", "AVX512_CORE_BF16"),
    "x86-64-v4-amx": ("avx512", "AVX512_CORE_AMX"),
}
# The portable build's scalar loops take minutes per token of the 135M-parameter preset: the tiny models only
PRESET_FREE_LEVELS = {"x86-64-v2"}


def runnable_levels() -> list[str]:
    """This machine's own level; QUENCH_GOLDEN_LEVELS=below: every other level of its architecture its CPU can
    execute; all: both."""
    own = current_target()
    if own.refused or own.level is None:
        return []
    chosen = os.environ.get("QUENCH_GOLDEN_LEVELS", "own")
    every = this_cpu_levels()
    return {"own": [own.level.name], "below": [name for name in every if name != own.level.name]}.get(chosen, every)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> Path:
    """The tiny cases' models drawn here, at this process's ISA, as the golden file's were (golden_tokens._tiny)."""
    sys.path.insert(0, str(HERE))
    from golden_tokens import save_tiny_models

    folder = tmp_path_factory.mktemp("golden-models")
    save_tiny_models(folder)
    return folder


def tokens_at(level: str, cases: list[str], models: Path) -> dict:
    aten, onednn = TORCH_ISA.get(level, ("", ""))
    env = {**os.environ, "QUENCH_NATIVE_MARCH": level, "QUENCH_GOLDEN_MODELS": str(models)}
    if aten:
        env.update(ATEN_CPU_CAPABILITY=aten, ONEDNN_MAX_CPU_ISA=onednn)
    done = subprocess.run([sys.executable, str(HERE / "golden_tokens.py"), "--cases", ",".join(cases)], env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_golden_file_holds_every_case():
    sys.path.insert(0, str(HERE))
    from golden_tokens import MODES, NEW_TOKENS, case_names

    assert sorted(GOLDEN) == sorted(case_names())
    for name, modes in GOLDEN.items():
        assert sorted(modes) == sorted(MODES), name
        assert all(len(row) == NEW_TOKENS for rows in modes.values() for row in rows), name
        assert modes["batch1"] == modes["batch8"] == modes["batch8-ngram"], name  # batch invariance, held in the file
        assert len({tuple(row) for row in modes["batch1"]}) > 1, name  # different prompts, different answers


@pytest.mark.slow
@pytest.mark.parametrize("level", runnable_levels() or ["none"])
def test_every_level_gives_the_golden_tokens(level, tiny_models):
    if level == "none":
        pytest.skip("no known kernel level on this machine (another architecture, or no C compiler)")
    cases = [name for name in GOLDEN if not (level in PRESET_FREE_LEVELS and name.startswith("smollm2"))]
    got = tokens_at(level, cases, tiny_models)
    moved = {f"{name} {mode} prompt {i}" for name in cases for mode in GOLDEN[name]
             for i, row in enumerate(GOLDEN[name][mode]) if got[name][mode][i] != row}
    assert not moved, f"{level}: {sorted(moved)}"
