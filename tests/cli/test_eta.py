"""The run's ETA (`quench.runs.eta`): Kaplan–Meier with rows in flight, the slot schedule, and recorded
sample timings replayed at ReCode's full setting, where tqdm's samples-per-second ETA misses by more than 20%."""

from __future__ import annotations

import argparse
import heapq
import io
import json
import random
from pathlib import Path

import pytest
from tqdm import tqdm

from quench.cli import console
from quench.cli.robustness import clock, stage_progress
from quench.robustness.pipeline import generation_order
from quench.runs.records import SampleRecord
from quench.runs.eta import EtaConfig, ExecutePace, GenerationEta, RunEta, schedule_end, spread, survival

# Every sample of a default `quench robustness` run (HumanEval/0-19, s = 1, smollm2-135m-instruct, bfloat16,
# batch 8, 2-core CPU) in the order the rows took their slots: its variant, tokens, latency, finish reason.
TIMINGS = Path(__file__).parent / "fixtures" / "robustness_timings.jsonl"


def timings() -> list[dict]:
    return [json.loads(line) for line in TIMINGS.read_text().splitlines()]


def test_kaplan_meier_counts_a_running_row_as_a_lower_bound():
    # finished after 1, 2, 3 s; one row running for 2.5 s: S = 3/4 after 1, 1/2 after 2, 0 after 3
    curve = survival([1.0, 2.0, 2.5, 3.0], [True, True, False, True], cap=10.0)
    assert curve.mean_rest(0.0) == pytest.approx(1.0 + 0.75 + 0.5)
    assert curve.mean_rest(2.5) == pytest.approx(0.5 * 0.5 / 0.5)  # E[L - 2.5 | L > 2.5]
    assert list(curve.quantiles(spread(0))) == []
    assert list(curve.quantiles([0.2, 0.5, 0.9])) == [1.0, 2.0, 3.0]


def test_a_row_running_past_every_finished_answer_runs_to_the_limit():
    curve = survival([1.0, 5.0], [True, False], cap=10.0)  # half the mass left at 5 s: it sits at the cap
    assert curve.mean_rest(5.0) == pytest.approx(5.0)
    assert curve.mean_rest(0.0) == pytest.approx(1.0 + 0.5 * 9.0)
    assert list(curve.quantiles([0.25, 0.75])) == [1.0, 10.0]


def test_the_schedule_ends_with_the_last_slot_to_free():
    # slots free at 1 and 3; three 2 s samples: 1 -> 3, 3 -> 5, 3 -> 5
    assert schedule_end([3.0, 1.0], [2.0, 2.0, 2.0], slots=2) == 5.0
    assert schedule_end([], [4.0], slots=3) == 4.0  # one sample on an idle engine
    assert schedule_end([3.0, 1.0], [2.0, 2.0, 2.0], slots=2, exact_tail=0) == 6.0  # spread evenly: 4 and 6


def test_execute_pace_counts_timeouts_over_the_workers():
    pace = ExecutePace(seconds_per_program=0.01, workers=2, timeout_s=10.0, timeout_rate=0.01)
    assert pace.seconds(1000) == pytest.approx(1000 * (0.01 + 0.05))


def slot_schedule(latencies: list[float], slots: int) -> list[tuple[float, float]]:
    """(start, finish) of each sample when `slots` take them in order, each as one frees (continuous batching)."""
    free, spans = [0.0] * slots, []
    for seconds in latencies:
        start = heapq.heappop(free)
        spans.append((start, start + seconds))
        heapq.heappush(free, start + seconds)
    return spans


def errors_at(samples: list[dict], share: float, slots: int = 8) -> tuple[float, float]:
    """(tqdm's ETA, quench's ETA) at `share` of the real generation time, each relative to the real rest."""
    spans = slot_schedule([s["seconds"] for s in samples], slots)
    end = max(finish for _, finish in spans)
    now = [0.0]
    eta = GenerationEta(EtaConfig(len(samples), max_new_tokens=512), clock=lambda: now[0])
    bar = tqdm(total=len(samples), file=io.StringIO())  # the bar the generate stage drew, on the same clock
    bar._time = lambda: now[0]
    bar.start_t = bar.last_print_t = 0.0
    events = sorted([(start, 1, i) for i, (start, _) in enumerate(spans)] + [(finish, 0, i) for i, (_, finish) in enumerate(spans)])
    for time, is_start, i in events:
        if time > share * end:
            break
        now[0] = time
        if is_start:
            eta.started(("prompt", i))
        else:
            eta.finished(("prompt", i), samples[i]["seconds"], samples[i]["num_tokens"], samples[i]["finish_reason"])
            bar.update()
    now[0] = share * end
    real = end - now[0]
    tqdm_left = (len(samples) - bar.n) / bar.format_dict["rate"]
    return (tqdm_left - real) / real, (eta.remaining() - real) / real


def full_setting(seed: int) -> list[dict]:
    """ReCode's full setting (164 problems: 328 nominal prompts, 27 transformations of ~420 distinct prompts
    each) drawn from the recorded samples of each transformation, in the pipeline's generation order: task by
    task, the i-th prompt of each transformation a prompt of task i mod 164."""
    from quench.datasets import Problem

    rng = random.Random(seed)
    by_group: dict[str, list[dict]] = {}
    for sample in timings():
        by_group.setdefault(sample["variant"].split("/")[0], []).append(sample)
    built = []
    for group in sorted(by_group, key=lambda name: (name != "nominal", name)):
        built += [rng.choice(by_group[group]) for _ in range(328 if group == "nominal" else 420)]
    prompts = [Problem(f"prompt{i}", f"{i:05d}", "", "", "f") for i in range(len(built))]
    task_of = {f"prompt{i}": f"task{i % 164}" for i in range(len(built))}
    return [built[int(p.task_id.removeprefix("prompt"))] for p in generation_order(prompts, seed=0, task_of=task_of)]


@pytest.mark.skipif(not TIMINGS.is_file(), reason="no recorded timings")
def test_at_a_tenth_of_recodes_full_setting_the_eta_is_within_20_percent_and_tqdms_is_not():
    errors = [errors_at(full_setting(seed), share=0.1) for seed in range(4)]
    tqdm_errors, quench_errors = zip(*errors)
    assert all(abs(e) <= 0.2 for e in quench_errors), quench_errors
    assert max(abs(e) for e in tqdm_errors) > 0.2, tqdm_errors  # the old bar's ETA: a rate over its last few updates
    later = [errors_at(full_setting(0), share) for share in (0.3, 0.5, 0.8)]
    assert all(abs(quench) <= 0.2 for _, quench in later), later


def rate_error_at(samples: list[dict], share: float, slots: int = 8) -> float:
    """The plain average rate's ETA (samples left x seconds per finished sample) at `share`, relative to the real rest."""
    spans = slot_schedule([s["seconds"] for s in samples], slots)
    end = max(finish for _, finish in spans)
    done = sum(finish <= share * end for _, finish in spans)
    return ((len(samples) - done) * share * end / max(done, 1) - (end - share * end)) / (end - share * end)


@pytest.mark.skipif(not TIMINGS.is_file(), reason="no recorded timings")
def test_on_a_run_of_220_prompts_rows_in_flight_make_the_tenth_mark_estimate_closer():
    """At the size of `--tasks 0-9 --seeds 1`, a tenth of the run is shorter than the longest answers: the
    rows still running are the long ones, and counting them (censored) is what keeps the estimate close."""
    recorded = timings()
    quench_errors, rate_errors = [], []
    for seed in range(40):
        rng = random.Random(seed)
        samples = [rng.choice(recorded) for _ in range(220)]
        quench_errors.append(abs(errors_at(samples, share=0.1)[1]))
        rate_errors.append(abs(rate_error_at(samples, share=0.1)))
    quench_mean, rate_mean = sum(quench_errors) / 40, sum(rate_errors) / 40
    assert quench_mean <= 0.2 and quench_mean < rate_mean - 0.05, (quench_mean, rate_mean)


def test_the_generate_bar_shows_the_whole_runs_time_left_and_each_tenth_says_it(capsys):
    console.set_progress(True)  # the bar is read here, though pytest's stderr is not a terminal
    bars = console.StageBars(own_eta=("generate",))
    args = argparse.Namespace(max_new_tokens=512, timeout=10.0)
    progress = stage_progress(bars, args, workers=2)
    bars.begin("check", 4)
    bars.begin("generate", 20)
    progress.planned(20)
    for i in range(8):
        progress.started(f"p{i}", 0)
    for i in range(2):  # a tenth of the 20: said at once, whenever the bar last refreshed
        progress.sample(SampleRecord("HumanEval/0", 0, "", finish_reason="stop", num_tokens=40, seconds=2.0,
                                     prompt_id=f"p{i}"))
    assert "left with execute" in bars.bar.postfix and "tok/s" in bars.bar.postfix
    assert bars.bar.format_dict["bar_format"] == console.OWN_ETA_FORMAT  # not tqdm's own rate
    lines = [line for line in capsys.readouterr().err.splitlines() if "of samples in" in line]
    assert lines[0].startswith("generate: 10% of samples in 0:00, about") and "execute" in lines[0]
    bars.end()
    console.set_progress(None)


def test_clock_reads_hours_minutes_seconds():
    assert (clock(59.6), clock(754), clock(3 * 3600 + 65)) == ("1:00", "12:34", "3:01:05")


def test_run_eta_adds_the_execute_stage():
    now = [0.0]
    run = RunEta(512, ExecutePace(seconds_per_program=0.1, workers=1, timeout_s=10.0, timeout_rate=0.0), clock=lambda: now[0])
    run.plan(samples=2, programs=2)
    run.started(("a", 0))
    now[0] = 4.0
    run.finished(SampleRecord("t", 0, "", raw="", finish_reason="stop", num_tokens=8, seconds=4.0, prompt_id="a"))
    left = run.left(4.0)
    assert left is not None and left.done == 0.5
    assert left.generate == pytest.approx(4.0) and left.execute == pytest.approx(0.2)


def test_run_eta_executes_each_distinct_answer_once():
    """Variants of a task often get the same answer, and the pipeline runs each program once: the execute stage
    counts the distinct answers' share of the samples finished so far."""
    now = [0.0]
    run = RunEta(512, ExecutePace(seconds_per_program=0.1, workers=1, timeout_s=10.0, timeout_rate=0.0), clock=lambda: now[0])
    run.plan(samples=8, programs=8)
    for index, (task, completion) in enumerate([("t", "return 1"), ("t", "return 1"), ("u", "return 1"), ("t", "return 2")]):
        run.started((f"p{index}", 0))
        now[0] += 1.0
        run.finished(SampleRecord(task, 0, completion, raw="", finish_reason="stop", num_tokens=8, seconds=1.0,
                                  prompt_id=f"p{index}"))
    left = run.left(now[0])
    assert left is not None and run.distinct_programs() == 6  # 3 distinct of 4 finished, of 8
    assert left.execute == pytest.approx(0.6)


def test_the_engine_reports_each_sample_taking_a_slot_before_it_finishes():
    from helpers import char_requests, char_tokenizer, tiny_llama
    from quench.engine.config import EngineConfig
    from quench.engine.backend import QuenchBackend
    from quench.engine.types import SamplingParams
    from quench.runs.eta import StartReporting

    events: list[tuple[str, str, int]] = []
    planned: list[int] = []
    backend = StartReporting(QuenchBackend(tiny_llama(), char_tokenizer(), EngineConfig(batch_size=2)),
                             planned.append, lambda key, index: events.append(("start", key, index)))
    requests = char_requests(["def f(x):", "def g(a, b):\n    return", "x = [", "class A:", "import os"])
    for result in backend.generate(requests, SamplingParams(max_new_tokens=6)):
        events.append(("finish", result.key, result.sample_index))
    assert planned == [5] and backend.name == "quench"  # everything else is the backend's own
    running: set[tuple[str, int]] = set()
    for kind, key, index in events:
        if kind == "start":
            assert (key, index) not in running
            running.add((key, index))
            assert len(running) <= 2  # the engine's slots
        else:
            running.remove((key, index))  # started before it finished
    assert not running and sum(kind == "start" for kind, _, _ in events) == 5
