"""The loop rule: where it stops, that it reads the text alone, and that it stops rows in the engine."""

from __future__ import annotations

import random

import pytest

from quench.datasets import Problem, load_benchmark
from quench.engine.backend import QuenchBackend
from quench.engine.config import EngineConfig
from quench.engine.hf_backend import HFBackend
from quench.engine.types import GenerationRequest, SamplingParams
from quench.runs.samples import GenerateConfig, generate_samples
from quench.stopping import LoopRule, LoopScanner, RuleHook, rules_for
from quench.stopping.loop_rule import EXACT_LOOP_RULE, LOOP_RULE, UNEXEMPT_LOOP_RULE, recorded_loop_rule, shape
from stopping.scripted import Script

SMALL = LoopRule(span=24, max_period=10, probe=4, numbers_span=0)
SMALL_NUMBERS = LoopRule(span=40, max_period=10, probe=4, numbers_span=16, numbers_repeats=3)


def exact_repeat_at(text: str, end: int, rule: LoopRule) -> bool:
    return any(end - rule.span - period >= 0 and text[end - rule.span : end] == text[end - rule.span - period : end - period]
               for period in range(1, rule.max_period + 1))


def numbers_repeat_at(text: str, end: int, rule: LoopRule) -> bool:
    """The numbers part by its definition, on text[:end] (which must not end in a digit)."""
    if not rule.numbers_span or text[end - 1].isdigit():
        return False
    form = shape(text[:end])
    for period in range(1, rule.max_period + 1):
        span = max(rule.numbers_span, (rule.numbers_repeats - 1) * period)
        last = form[len(form) - period :]
        if len(form) - span - period >= 0 and form[-span:] == form[-span - period : -period] and any(c.isalpha() for c in last):
            return True
    return False


def first_repeat(text: str, rule: LoopRule) -> int | None:
    """The rule by its definition: the first end where the exact part or the numbers part holds."""
    for end in range(1, len(text) + 1):
        if exact_repeat_at(text, end, rule) or numbers_repeat_at(text, end, rule):
            return end
    return None


def fed_in_pieces(text: str, rule: LoopRule, rng: random.Random) -> int | None:
    scanner, position = LoopScanner(rule), 0
    while position < len(text):
        size = rng.randint(1, 9)
        if (at := scanner.feed(text[position : position + size])) is not None:
            return at
        position += size
    return None


def planted_loop(rng: random.Random) -> str:
    """Random text over a small alphabet, with a stretch that repeats a random unit some number of times."""
    noise = lambda n: "".join(rng.choice("ab c\n") for _ in range(n))  # noqa: E731
    unit = noise(rng.randint(1, 14))
    return noise(rng.randint(0, 40)) + unit * rng.randint(1, 6) + noise(rng.randint(0, 40))


def checked_stop(text: str, rule: LoopRule, rng: random.Random) -> int | None:
    """The definition's stop, after checking that the scanner gives it fed whole and in random pieces."""
    expected = first_repeat(text, rule)
    assert LoopScanner(rule).feed(text) == expected, text
    assert fed_in_pieces(text, rule, rng) == expected, text
    return expected


def test_scanner_stops_where_the_definition_says_whatever_the_pieces():
    rng = random.Random(0)
    fired = 0
    for _ in range(600):
        fired += checked_stop(planted_loop(rng), SMALL, rng) is not None
    assert 100 < fired < 500  # both kinds of text were tried


def planted_count(rng: random.Random) -> str:
    """Random text with a stretch that repeats a unit holding a number that changes (or a name's digits)."""
    noise = lambda n: "".join(rng.choice("ab c\n12") for _ in range(n))  # noqa: E731
    head, tail = noise(rng.randint(1, 5)), noise(rng.randint(0, 5))
    glue = rng.choice(["", "x", "_", " "])  # "x" and "_": the digits belong to a name and keep their own
    start = rng.randint(0, 20)
    stretch = "".join(f"{head}{glue}{start + 7 * i}{tail}" for i in range(rng.randint(1, 9)))
    return noise(rng.randint(0, 30)) + stretch + noise(rng.randint(0, 30))


def test_the_numbers_part_stops_where_the_definition_says_whatever_the_pieces():
    rng = random.Random(1)
    fired = 0
    for _ in range(500):
        text = planted_count(rng)
        expected = checked_stop(text, SMALL_NUMBERS, rng)
        fired += expected is not None and first_repeat(text, LoopRule(**{**SMALL_NUMBERS.settings(), "numbers_span": 0})) != expected
    assert 50 < fired < 450  # the numbers part stopped texts the exact part does not, and missed others


def test_a_shape_keeps_the_digits_of_names():
    assert shape("Example 12: x1 = a_2[30] + 4.5e10") == "Example 0: x1 = a_2[0] + 0.0e10"


def test_a_count_is_a_loop_and_data_is_not():
    count = "".join(f"    {i}. The date should be in the format: MM-DD-YYYY\n" for i in range(1, 30))
    stop = LoopScanner().feed(count)
    assert stop is not None and count[:stop].count("\n") < 10 and LoopScanner(EXACT_LOOP_RULE).feed(count) is None
    ladder = "".join(f"    elif n == {i}:\n        return {i * i}\n" for i in range(40))
    assert LoopScanner().feed(ladder) is not None
    table = "PRIMES = [" + ", ".join(str(p) for p in range(2, 2000) if all(p % d for d in range(2, p))) + "]\n"
    assert LoopScanner().feed(table) is None  # no letter in the period
    names = "".join(f"    p{i}x = start + {i} * w\n" for i in range(30))  # names that differ: not one shape
    assert LoopScanner().feed(names) is None


def test_a_period_longer_than_max_period_or_a_repeat_shorter_than_span_is_no_loop():
    unit = "x = compute(1)\n"  # 15 characters
    assert LoopScanner(LoopRule(span=60, max_period=14, probe=8, numbers_span=0)).feed(unit * 10) is None
    assert LoopScanner(LoopRule(span=60, max_period=15, probe=8, numbers_span=0)).feed(unit * 10) == 75  # 60 after one period
    assert LoopScanner(LoopRule(span=60, max_period=15, probe=8, numbers_span=0)).feed(unit * 4 + "y") is None  # too short
    many = LoopRule(span=400, max_period=15, probe=8, numbers_span=20, numbers_repeats=6)  # 5 periods past the first
    assert LoopScanner(many).feed(unit * 10) == 90


@pytest.mark.parametrize("benchmark", ["humaneval", "mbpp"])
def test_prompts_and_solutions_are_not_loops(benchmark):
    """What an answer holds: the prompt's text (a chat answer often repeats it) and a solution."""
    for problem in load_benchmark(benchmark, split="all") if benchmark == "mbpp" else load_benchmark(benchmark):
        assert LoopScanner(LOOP_RULE, problem.prompt).feed(problem.prompt + problem.canonical_solution) is None, problem.task_id
        assert LoopScanner(UNEXEMPT_LOOP_RULE).feed(problem.prompt + problem.canonical_solution) is None, problem.task_id


def test_a_span_the_prompt_holds_is_no_loop():
    """MBPP/37's prompt holds three identical doctest examples, a loop over 150 characters: restated, they go on
    where the rule has the prompt; written again and again, the numbers part stops them."""
    problem = next(p for p in load_benchmark("mbpp", split="all") if p.task_id == "MBPP/37")
    example = ("    >>> sort_mixed_list([19,'red',12,'green','blue', 10,'white','green',1])\n"
               "    [1, 10, 12, 19, 'blue', 'green', 'green', 'red', 'white']\n")
    assert problem.prompt.count(example) == 3
    short = LoopRule(**{**LOOP_RULE.settings(), "span": 150})
    answer = "```python\n" + problem.prompt
    assert LoopScanner(short).feed(answer) is not None  # without its prompt
    assert LoopScanner(LoopRule(**{**short.settings(), "exempt_spans": False}), problem.prompt).feed(answer) is not None
    assert LoopScanner(short, problem.prompt).feed(answer) is None
    for pieces in (1, 3, 7):
        scanner = LoopScanner(short, problem.prompt)
        assert all(scanner.feed(answer[i : i + pieces]) is None for i in range(0, len(answer), pieces))
    looping = answer + "\n" + example * 8  # every span of it the prompt holds: the numbers part's 4 periods stop it
    stop = LoopScanner(short, problem.prompt).feed(looping)
    assert stop is not None and len(answer) < stop < len(looping)
    assert LoopScanner(LoopRule(**{**short.settings(), "numbers_span": 0}), problem.prompt).feed(looping) is None


def test_a_long_period_is_a_loop():
    """A function written again and again, its docstring and all: a period of some 280 characters."""
    doc = '    """\n    Given a string text, replace all spaces in it with underscores,\n    and if a string has more than 2 consecutive spaces,\n    then replace all consecutive spaces with -\n    fix_spaces("Example 1") == "Example_1"\n    """\n    return text\n\n'
    text = "def fix_spaces(text):\n" + doc
    assert 256 < len(text) < LOOP_RULE.max_period
    assert LoopScanner(LOOP_RULE).feed(text * 6) == len(text) + LOOP_RULE.span
    assert LoopScanner(UNEXEMPT_LOOP_RULE).feed(text * 6) is None


def test_humaneval_tests_are_not_exact_loops():
    """Test code counts in shape only: asserts that differ in their numbers (a sanitizer drops test code)."""
    for problem in load_benchmark("humaneval"):
        assert LoopScanner(EXACT_LOOP_RULE).feed(problem.prompt + problem.canonical_solution + problem.test) is None


def test_the_rule_records_its_definition():
    assert LoopRule(**LOOP_RULE.settings()) == LOOP_RULE and EXACT_LOOP_RULE.numbers_span == 0
    assert recorded_loop_rule(LOOP_RULE.settings()) == LOOP_RULE
    older = {k: v for k, v in UNEXEMPT_LOOP_RULE.settings().items() if k != "exempt_spans"}
    assert recorded_loop_rule(older) == UNEXEMPT_LOOP_RULE


def test_the_rule_is_checked():
    with pytest.raises(ValueError, match="probe"):
        LoopRule(span=8, probe=16)
    with pytest.raises(ValueError, match="max_period"):
        LoopRule(max_period=0)
    with pytest.raises(ValueError, match="numbers_span"):
        LoopRule(numbers_span=8)
    with pytest.raises(ValueError, match="numbers_repeats"):
        LoopRule(numbers_repeats=1)


# A chat answer whose body repeats one line; another that ends before any repeat is long enough.
CHAT = {
    "q/0": ["Write f.\n", "```python\n", "def f(x):\n", "    x = x + 1  # again\n"],
    "q/1": ["Write g.\n", "```py\n", "def g(x):\n", "    return x\n", "```\n", "Done.\n"],
}
ENTRY = {"q/0": "f", "q/1": "g"}
SCRIPT = Script(list(CHAT.values()))
SAMPLING = SamplingParams(max_new_tokens=16)
RULE = LoopRule(span=60, max_period=30, probe=8)


def problem(key: str) -> Problem:
    return Problem(key, CHAT[key][0], "", "", ENTRY[key], benchmark="humaneval")


def requests() -> list[GenerationRequest]:
    return [GenerationRequest(k, SCRIPT.ids([problem(k).prompt]), stop_sequences=("\n```\n",)) for k in CHAT]


@pytest.mark.parametrize("drafter", ["none", "ngram"])
def test_engine_stops_a_looping_row_where_the_text_says(drafter):
    backend = QuenchBackend(SCRIPT.model, SCRIPT.tokenizer, EngineConfig(batch_size=2, drafter=drafter))
    full = {r.key: r for r in backend.generate(requests(), SAMPLING)}
    hook = RuleHook({k: rules_for(problem(k), "chat", function_complete=False, loop=RULE) for k in CHAT})
    ruled = {r.key: r for r in backend.generate(requests(), SAMPLING, stop_hook=hook)}
    looping = full["q/0"].text
    assert ruled["q/0"].text == looping[: first_repeat(looping, RULE)] == hook.cut(requests()[0], looping)
    assert ruled["q/0"].finish_reason == "hook"
    assert ruled["q/0"].token_ids == full["q/0"].token_ids[: len(ruled["q/0"].token_ids)]
    assert len(ruled["q/0"].token_ids) < len(full["q/0"].token_ids) == SAMPLING.max_new_tokens
    assert ruled["q/1"].text == full["q/1"].text and ruled["q/1"].finish_reason == full["q/1"].finish_reason == "stop"


@pytest.mark.parametrize("rule", ["loop", "function,loop"])
def test_generate_samples_with_the_loop_rule_gives_the_same_text_on_every_backend(tmp_path, rule):
    problems = [problem(k) for k in CHAT]
    encode = lambda text: SCRIPT.ids([text])  # noqa: E731
    config = GenerateConfig(1, SAMPLING, (), "chat", stop_rule=rule, loop_rule=RULE)  # the answers here are short
    quench = QuenchBackend(SCRIPT.model, SCRIPT.tokenizer, EngineConfig(batch_size=2))
    hf = HFBackend(SCRIPT.model, SCRIPT.tokenizer, batch_size=2)
    ours = {r.task_id: r for r in generate_samples(problems, quench, encode, config, tmp_path / "q.jsonl")}
    theirs = {r.task_id: r for r in generate_samples(problems, hf, encode, config, tmp_path / "h.jsonl")}
    for key in CHAT:  # without stop sequences both answers end in a loop ("Done." again and again)
        assert ours[key].raw == theirs[key].raw
        assert ours[key].finish_reason == theirs[key].finish_reason == "hook"
        assert ours[key].num_tokens < theirs[key].num_tokens
    assert ours["q/0"].completion.startswith("def f(x):\n    x = x + 1  # again\n")
