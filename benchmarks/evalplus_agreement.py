"""MBPP+ verdicts of quench beside EvalPlus's own, on the same samples: the agreement and every difference.

The samples: every MBPP+ reference solution, up to two mutants of each (an operator or constant
changed in its body: mostly wrong programs, some still right) and for every eighth task one that
returns None, hand-made samples for EvalPlus's
special rules (set-compared outputs, bool-or-None tasks, Mbpp/581, 558, a Counter's dict, floats
rounded), and any samples given with --samples (task_id and completion or solution). Each is a
whole program (`solution`: quench's prompt and the completion), so both tools run the same text.

quench judges them through its sandbox pool; EvalPlus runs from its own virtual environment
(`pip install evalplus==0.3.1` there), offline, on the same MBPP+ file (MBPP_OVERRIDE_PATH).
A sample agrees when both give the same base verdict and the same base+plus verdict. Usage:
python benchmarks/evalplus_agreement.py EVALPLUS_VENV [--workers N] [--samples FILE] [--out DIR]
  [--mutants N] [--none-every K] [--per-task N] [--write-samples FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from quench.datasets import load_benchmark
from quench.datasets.mbppplus import mbppplus_path
from quench.execution import SandboxLimits, SandboxPool
from quench.execution.plus import PlusPool, prepare_oracles, sandbox_limits
from quench.execution.program_build import program_for

# (pattern, replacement) tried in order on a reference's body; the first two that match make mutants
MUTATIONS = [
    (r"<=", "<"), (r">=", ">"), (r"(?<![<>=!])<(?![<=])", "<="), (r"(?<![<>=!-])>(?![>=])", ">="),
    (r"==", "!="), (r"\+ 1\b", "+ 2"), (r"- 1\b", ""), (r"\bmin\(", "max("), (r"\bmax\(", "min("),
    (r"\bTrue\b", "False"), (r"\band\b", "or"), (r"\[1:\]", "[2:]"), (r"\breverse=True", "reverse=False"),
    (r"\bsorted\(", "list("), (r"\s\*\s", " + "), (r"\s\+\s", " - "),
]

# hand-made samples for EvalPlus's special rules: (task id, completion)
SPECIAL = [
    ("Mbpp/2", "  return tuple(sorted(set(test_tup1) & set(test_tup2), reverse=True))\n"),
    ("Mbpp/7", "  import re\n  return sorted(re.findall(r\"\\b\\w{4,}\\b\", text), reverse=True)\n"),
    ("Mbpp/111", "    return sorted(set.intersection(*map(set, nestedlist)), reverse=True)\n"),
    ("Mbpp/140", "  return sorted(set(x for l in test_list for x in l), reverse=True)\n"),
    ("Mbpp/232", "    import heapq\n    return heapq.nlargest(n, list1)[::-1]\n"),
    ("Mbpp/249", "    return sorted(set(array_nums1) & set(array_nums2), reverse=True)\n"),
    ("Mbpp/579", "  return tuple(sorted(set(test_tup1) ^ set(test_tup2), reverse=True))\n"),
    ("Mbpp/769", "    return sorted(set(li1) ^ set(li2))\n"),
    ("Mbpp/737", "\timport re\n\treturn bool(re.search('^[aeiouAEIOU][A-Za-z0-9_]*', string))\n"),
    ("Mbpp/737", "\treturn False\n"),
    ("Mbpp/737", "\treturn 1\n"),
    ("Mbpp/787", "        import re\n        return re.search('ab{3}', text) is not None\n"),
    ("Mbpp/787", "        return True\n"),
    ("Mbpp/794", "    import re\n    return bool(re.search('a.*?b$', text))\n"),
    ("Mbpp/794", "    return None\n"),
    ("Mbpp/581", "    import math\n    return round(b * b + 2 * b * math.sqrt((b / 2) ** 2 + s ** 2))\n"),
    ("Mbpp/581", "    return 2 * b * s + b * b + 1\n"),
    ("Mbpp/558", "    a, b = str(n1), str(n2)\n    w = max(len(a), len(b))\n"
                 "    return sum(abs(int(x) - int(y)) for x, y in zip(a.zfill(w), b.zfill(w)))\n"),
    ("Mbpp/88", "  out = {}\n  for x in list1:\n    out[x] = out.get(x, 0) + 1\n  return out\n"),
    ("Mbpp/88", "  import collections\n  return collections.OrderedDict(collections.Counter(list1))\n"),
    ("Mbpp/295", "    return 0\n"),
    ("Mbpp/164", "  return None\n"),
]


def mutants(body: str, most: int) -> list[str]:
    out: list[str] = []
    for pattern, replacement in MUTATIONS:
        changed = re.sub(pattern, replacement, body, count=1)
        if changed != body and changed not in out:
            out.append(changed)
        if len(out) == most:
            break
    return out


def build_samples(extra: Path | None, most: int = 2, none_every: int = 8) -> list[dict]:
    problems = {p.task_id: p for p in load_benchmark("mbpp+", "all")}
    samples = []
    for index, (task_id, problem) in enumerate(problems.items()):
        body = problem.canonical_solution
        samples.append({"task_id": task_id, "completion": body, "origin": "reference"})
        samples += [{"task_id": task_id, "completion": m, "origin": "mutant"} for m in mutants(body, most)]
        if index % none_every == 0:  # a sample that returns nothing, indented as the body is
            indent = body[:len(body) - len(body.lstrip())].split("\n")[-1]
            samples.append({"task_id": task_id, "completion": f"{indent}return None\n", "origin": "mutant"})
    samples += [{"task_id": t, "completion": c, "origin": "special"} for t, c in SPECIAL]
    if extra is not None:
        for line in extra.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                samples.append({"task_id": row["task_id"], "completion": row.get("completion", ""),
                                "solution": row.get("solution", ""), "origin": "given"})
    for sample in samples:
        sample["solution"] = sample.get("solution") or problems[sample["task_id"]].prompt + sample["completion"]
    return samples


def padded(samples: list[dict], per_task: int) -> list[dict]:
    """`samples` with copies of each task's reference added until it has `per_task` samples."""
    counts = {t: sum(s["task_id"] == t for s in samples) for t in dict.fromkeys(s["task_id"] for s in samples)}
    references = {s["task_id"]: s for s in samples if s["origin"] == "reference"}
    return samples + [references[t] for t, n in counts.items() for _ in range(per_task - n)]


def quench_verdicts(samples: list[dict], workers: int) -> list[tuple[bool, bool, str]]:
    problems = {p.task_id: p for p in load_benchmark("mbpp+", "all")}
    ids = sorted({s["task_id"] for s in samples})
    prepare_oracles(ids, workers)
    with SandboxPool(workers, sandbox_limits(SandboxLimits(), ids)) as pool:
        programs = ((i, program_for(problems[s["task_id"]], "", s["solution"])) for i, s in enumerate(samples))
        results = dict(PlusPool(pool).imap(programs))
    return [(results[i].base.passed, results[i].plus.passed, f"{results[i].plus.outcome.value}: {results[i].plus.detail}")
            for i in range(len(samples))]


def evalplus_verdicts(samples: list[dict], venv: Path, workers: int, directory: Path) -> list[tuple[bool, bool]]:
    path = directory / "samples.jsonl"
    path.write_text("".join(json.dumps({"task_id": s["task_id"], "solution": s["solution"]}) + "\n" for s in samples))
    data = directory / "MbppPlus.jsonl.gz"
    data.write_bytes(mbppplus_path().read_bytes())
    env = {**os.environ, "MBPP_OVERRIDE_PATH": str(data), "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"}
    subprocess.run([str(venv / "bin" / "evalplus.evaluate"), "--dataset", "mbpp", "--samples", str(path),
                    "--parallel", str(workers), "--i_just_wanna_run"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    results = json.loads((directory / "samples_eval_results.json").read_text())["eval"]
    seen: dict[str, int] = {}
    verdicts = []
    for s in samples:
        index = seen.get(s["task_id"], 0)
        seen[s["task_id"]] = index + 1
        row = results[s["task_id"]][index]
        assert row["solution"] == s["solution"], "EvalPlus's results are not in the samples' order"
        verdicts.append((row["base_status"] == "pass", row["base_status"] == row["plus_status"] == "pass"))
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("evalplus_venv", type=Path, help="a virtual environment with evalplus==0.3.1")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--samples", type=Path, help="more samples: task_id and completion or solution")
    parser.add_argument("--out", type=Path, help="keep the samples and EvalPlus's results here")
    parser.add_argument("--mutants", type=int, default=2, help="mutants per task, at most")
    parser.add_argument("--none-every", type=int, default=8, help="a sample returning None for every k-th task")
    parser.add_argument("--per-task", type=int, default=0, help="copies of the reference fill each task up to this")
    parser.add_argument("--write-samples", type=Path, help="only write the samples (task_id, solution) here")
    args = parser.parse_args()
    samples = padded(build_samples(args.samples, args.mutants, args.none_every), args.per_task)
    if args.write_samples:
        args.write_samples.write_text("".join(json.dumps({"task_id": s["task_id"], "solution": s["solution"]}) + "\n"
                                              for s in samples))
        print(f"{len(samples)} samples written to {args.write_samples}")
        return
    origins = {o: sum(s["origin"] == o for s in samples) for o in dict.fromkeys(s["origin"] for s in samples)}
    print(f"{len(samples)} samples: " + ", ".join(f"{n} {o}" for o, n in origins.items()), flush=True)
    start = time.perf_counter()
    ours = quench_verdicts(samples, args.workers)
    print(f"quench: {time.perf_counter() - start:.0f} s", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        directory = args.out or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        theirs = evalplus_verdicts(samples, args.evalplus_venv, args.workers, directory)
        print(f"EvalPlus: {time.perf_counter() - start:.0f} s", flush=True)
    differences = [(s, o, t) for s, o, t in zip(samples, ours, theirs) if o[:2] != t]
    base_agree = sum(o[0] == t[0] for o, t in zip(ours, theirs))
    plus_agree = sum(o[1] == t[1] for o, t in zip(ours, theirs))
    n = len(samples)
    print(f"agreement: base {base_agree}/{n}, base+plus {plus_agree}/{n}, both {n - len(differences)}/{n}")
    print(f"passing (quench / EvalPlus): base {sum(o[0] for o in ours)} / {sum(t[0] for t in theirs)}, "
          f"base+plus {sum(o[1] for o in ours)} / {sum(t[1] for t in theirs)}")
    for sample, (base, plus, detail), (their_base, their_plus) in differences:
        print(f"\n{sample['task_id']} ({sample['origin']}): quench base={base} plus={plus} ({detail[:200]}); "
              f"EvalPlus base={their_base} plus={their_plus}\n{sample['solution']}")
    sys.exit(0)


if __name__ == "__main__":
    main()
