"""benchmarks/loop_rule_replay.py on a hand-made run directory: a looping answer the numbers part cuts earlier is
counted with its tokens, its program is run beside the kept one, and a verdict that changes is reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from quench.datasets import load_benchmark

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "loop_rule_replay.py"


def sample(task_id: str, raw: str, completion: str, reason: str, tokens: int) -> dict:
    return {"task_id": task_id, "sample_index": 0, "variant": "nominal/full", "raw": raw, "completion": completion,
            "solution": "", "finish_reason": reason, "num_tokens": tokens}


def test_the_replay_counts_cut_answers_tokens_and_changed_verdicts(tmp_path: Path) -> None:
    problem = next(p for p in load_benchmark("humaneval") if p.task_id == "HumanEval/0")
    body = problem.canonical_solution
    count = "".join(f"    # Step {i}: compare the two numbers again\n" for i in range(1, 40))
    # A passing answer whose comment count runs to the limit: cut inside the count, the program stays the same.
    passing = f"```python\n{problem.prompt}{body}{count}"
    # An answer whose body comes after the count: the cut drops the body, so the program changes and fails.
    late = f"```python\n{problem.prompt}{count}{body}```"
    (tmp_path / "config.json").write_text(json.dumps({"benchmark": "humaneval", "tasks": ["HumanEval/0"],
                                                      "prompt_format": "chat"}))
    (tmp_path / "variants.jsonl").write_text("")
    rows = [sample("HumanEval/0", passing, body, "length", 512), {**sample("HumanEval/0", late, body, "stop", 400),
                                                                  "sample_index": 1}]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "2 answers, 912 tokens; the rule cuts 2 answers earlier" in out
    assert "ended by length: 1 cut" in out and "ended by stop: 1 cut" in out
    assert "verdicts changed: 1" in out and "ended by stop: passed True -> False: 1" in out
