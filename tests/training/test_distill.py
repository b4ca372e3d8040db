"""Draft distillation on a tiny target: data, teacher cache, loss going down, exact resume, clear errors."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from quench.errors import InputFileError, QuenchError
from quench.models.draft import build_draft, load_draft
from quench.training import distill_data
from quench.training.distill import DistillConfig, answer_prompts, distill
from quench.training.distill_data import TRAINING_SPLITS
from quench.training.distill_data import Example, fit_length, generate_answers, read_examples, stdlib_functions, stdlib_prompts
from quench.training.distill_teacher import teacher_targets
from quench.training.distill_train import HeadView, evaluate, frequent_tokens, train_draft
from training_helpers import tiny_loaded

SNIPPETS = [
    "def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i)\n", "x = [1, 2, 3]\ny = sum(x)\n",
    "def neg(v):\n    return -v\n", "class A:\n    pass\n", "while n > 0:\n    n -= 1\n",
    "if a < b:\n    a, b = b, a\n", "import os\nprint(os.sep)\n", "def sq(x):\n    return x * x\n",
    "total = 0\nfor v in xs:\n    total += v\n", "s = 'abc'\nprint(s[::-1])\n", "def inc(n):\n    return n + 1\n",
]
HELDOUT = ["def sub(a, b):\n    return a - b\n", "for j in range(5):\n    print(j * 2)\n"]


@pytest.fixture
def target():
    loaded = tiny_loaded()
    with torch.no_grad():
        loaded.model.lm_head.weight.mul_(40)  # a confident teacher: its distribution depends on the context
    return loaded


def examples_of(target, texts, prefix="ex"):
    tokenizer = target.tokenizer
    out = []
    for i, text in enumerate(texts):
        ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"])
        out.append(Example(f"{prefix}/{i}", (tokenizer.bos_token_id,) + ids, 4))
    return out


def config(**changes) -> DistillConfig:
    base = dict(source_layers=(0,), epochs=3, batch_size=4, learning_rate=3e-3, warmup_steps=2, checkpoint_every=2,
                top_k=8)
    return DistillConfig(**{**base, **changes})


def test_distillation_reduces_kl_on_held_out_code(target, tmp_path):
    train, heldout = examples_of(target, SNIPPETS), examples_of(target, HELDOUT, "held")
    teachers = teacher_targets(target.model, train, tmp_path / "t", top_k=8)
    held_teachers = teacher_targets(target.model, heldout, tmp_path / "h", top_k=8)
    draft = build_draft(target.model, (0,))
    head = HeadView(target.model.lm_head.weight, None)
    before = evaluate(draft, head, heldout, held_teachers)
    train_draft(draft, head, train, teachers, config(epochs=6), tmp_path)
    after = evaluate(draft, head, heldout, held_teachers)
    assert after.kl < 0.7 * before.kl, (before, after)


class Interrupt(Exception):
    pass


class StopAfter:
    def __init__(self, steps: int) -> None:
        self.steps, self.done = steps, 0

    def begin(self, phase, total):
        pass

    def advance(self, count=1, **info):
        self.done += count
        if info and self.done >= self.steps:
            raise Interrupt

    def end(self):
        pass


def trained_weights(draft):
    return {name: p.detach().clone() for name, p in draft.named_parameters() if p.requires_grad}


def test_resume_after_a_kill_gives_identical_weights(target, tmp_path):
    train = examples_of(target, SNIPPETS)
    teachers = teacher_targets(target.model, train, tmp_path / "t", top_k=8)
    head = HeadView(target.model.lm_head.weight, None)
    straight = build_draft(target.model, (0,))
    train_draft(straight, head, train, teachers, config(), tmp_path / "a")
    with pytest.raises(Interrupt):  # killed after step 3; the last checkpoint is step 2
        train_draft(build_draft(target.model, (0,)), head, train, teachers, config(), tmp_path / "b", StopAfter(3))
    resumed = build_draft(target.model, (0,))
    assert train_draft(resumed, head, train, teachers, config(), tmp_path / "b") == 9
    a, b = trained_weights(straight), trained_weights(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_corrupt_or_foreign_checkpoint_is_a_clear_error(target, tmp_path):
    train = examples_of(target, SNIPPETS[:4])
    teachers = teacher_targets(target.model, train, tmp_path / "t", top_k=8)
    head = HeadView(target.model.lm_head.weight, None)
    train_draft(build_draft(target.model, (0,)), head, train, teachers, config(epochs=1), tmp_path)
    with pytest.raises(QuenchError, match="other settings"):
        train_draft(build_draft(target.model, (0,)), head, train, teachers, config(epochs=2), tmp_path)
    (tmp_path / "state.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(QuenchError, match="corrupt training checkpoint"):
        train_draft(build_draft(target.model, (0,)), head, train, teachers, config(epochs=1), tmp_path)


def test_teacher_targets_are_cached_and_a_corrupt_cache_is_reported(target, tmp_path):
    train = examples_of(target, SNIPPETS)
    first = teacher_targets(target.model, train, tmp_path, top_k=8)
    assert [len(t.indices) for t in first] == [len(e.ids) - e.answer_start for e in train]

    class NoTeacher(torch.nn.Module):
        def __getattr__(self, name):
            raise AssertionError("the cache should have been used")

    again = teacher_targets(NoTeacher(), train, tmp_path, top_k=8)
    assert all(torch.equal(a.logprobs, b.logprobs) for a, b in zip(first, again))
    next(tmp_path.glob("*.pt")).write_bytes(b"junk")
    with pytest.raises(QuenchError, match="corrupt teacher cache"):
        teacher_targets(target.model, train, tmp_path, top_k=8)


def test_a_reduced_head_trains_over_its_tokens_only(target, tmp_path):
    train = examples_of(target, SNIPPETS)
    teachers = teacher_targets(target.model, train, tmp_path / "t", top_k=8)
    ids = frequent_tokens(train, 20, always=[2])
    assert len(ids) == 20 and 2 in ids.tolist()
    head = HeadView(target.model.lm_head.weight, ids)
    before = evaluate(build_draft(target.model, (0,)), head, train, teachers)
    draft = build_draft(target.model, (0,))
    train_draft(draft, head, train, teachers, config(epochs=4), tmp_path)
    assert evaluate(draft, head, train, teachers).kl < before.kl


def test_fit_length_keeps_the_first_token_the_prompt_end_and_enough_answer():
    example = Example("k", tuple(range(500)), 250)
    cut = fit_length(example, 256, 128)
    assert len(cut.ids) == 256 and cut.ids[0] == 0 and cut.ids[cut.answer_start] == 250
    assert cut.ids[cut.answer_start - 1] == 249 and cut.ids[-1] == 250 + 127
    short = Example("k", tuple(range(300)), 280)
    assert fit_length(short, 256, 128).ids[-1] == 299  # a short answer stays whole
    assert fit_length(Example("k", (1, 2, 3), 1), 256) == Example("k", (1, 2, 3), 1)


def test_stdlib_functions_are_read_with_their_docstrings(tmp_path):
    source = 'def documented(x):\n    """Say why."""\n    y = x\n    return y\n\n\ndef bare(x):\n    return x\n'
    (tmp_path / "mod.py").write_text(source)
    [(key, prompt, body)] = distill_data._functions_in(tmp_path / "mod.py", tmp_path, 40)
    assert key == "stdlib/mod.documented" and prompt.endswith('"""Say why."""\n') and body.endswith("return y\n")


def test_answers_are_generated_once_and_resume_after_a_partial_line(problems, tmp_path):
    target = tiny_loaded("chat")
    path = tmp_path / "answers.jsonl"
    calls = []
    first = generate_answers(target, problems[:2], path, batch_size=2, max_new_tokens=6, progress=calls.append)
    assert [e.key for e in first] == [p.task_id for p in problems[:2]] and sum(calls) == 2
    with path.open("a") as f:
        f.write('{"key": "Tiny/3", "ids": [1,')  # a run killed mid-line
    calls.clear()
    both = generate_answers(target, problems[:3], path, batch_size=2, max_new_tokens=6, progress=calls.append)
    assert both[:2] == first and calls == [2, 1]
    assert len(read_examples(path)) == 3
    assert all(e.answer_start < len(e.ids) for e in both)


def test_a_malformed_answers_file_names_the_line(tmp_path):
    path = tmp_path / "answers.jsonl"
    path.write_text('{"key": "a", "ids": [1, 2], "answer_start": 1}\n{"oops": 1}\n{"key": "b", "ids": [1], "answer_start": 0}\n')
    with pytest.raises(InputFileError, match=":2:"):
        read_examples(path)


@pytest.mark.parametrize("head_tokens", [0, 40])
def test_the_whole_pipeline_writes_a_loadable_draft(monkeypatch, problems, tmp_path, head_tokens):
    from quench.training import distill as pipeline

    target = tiny_loaded("chat")
    monkeypatch.setattr(pipeline, "training_prompts", lambda limit: problems[:limit])  # MBPP is too long for it
    functions = [("stdlib/m.f", 'def f(a):\n    """Twice a."""\n', 'def f(a):\n    """Twice a."""\n    return 2 * a\n')] * 3
    monkeypatch.setattr(distill_data, "stdlib_functions", lambda limit, seed=0: functions[:limit])
    settings = DistillConfig(source_layers=(1,), head_tokens=head_tokens, prompts=3, stdlib_functions=3,
                             max_new_tokens=6, max_tokens=96, top_k=4, epochs=1, batch_size=2, heldout_every=2)
    result = distill(target, tmp_path, settings)
    assert result.draft_path == tmp_path / "draft.safetensors" and result.heldout_examples > 0
    assert {source for source, _ in result.after_by_source} <= {"Tiny", "stdlib"} and result.after_by_source
    draft = load_draft(str(result.draft_path), target)
    assert draft.config.num_hidden_layers == 1
    logits = draft(torch.tensor([[1, 5, 6]])).logits
    assert logits.shape[-1] == target.model.config.vocab_size
    assert result.head_tokens == target.model.config.vocab_size if not head_tokens else result.head_tokens <= head_tokens


def test_training_prompts_never_come_from_the_evaluation_sets():
    assert TRAINING_SPLITS == ("train", "validation")
    keys = {p.task_id for p in distill_data.training_prompts()}
    assert len(keys) == 464 and not any(k.startswith("HumanEval") for k in keys)
    from quench.datasets import load_humaneval, load_mbpp

    assert not keys & {p.task_id for p in load_mbpp("test")}
    answered = answer_prompts(DistillConfig(stdlib_prompts=100))
    assert len(answered) == 564 and {p.task_id for p in answered[:464]} == keys
    evaluation = load_mbpp("test") + load_humaneval()
    assert not {p.task_id for p in answered} & {p.task_id for p in evaluation}
    assert not {p.prompt.strip() for p in answered} & {p.prompt.strip() for p in evaluation}


def test_stdlib_prompts_come_after_the_real_code_functions_of_the_same_shuffle():
    functions = stdlib_functions(12, seed=3)
    prompts = stdlib_prompts(7, skip=5, seed=3)
    assert [p.task_id for p in prompts] == ["stdlib-answer/" + key.removeprefix("stdlib/") for key, _, _ in functions[5:]]
    assert [p.prompt + p.canonical_solution for p in prompts] == [source for _, _, source in functions[5:]]
    assert all(p.prompt.rstrip().endswith(('"""', "'''")) and p.entry_point in p.prompt for p in prompts)
    assert [p.task_id for p in stdlib_prompts(7, skip=5, seed=3)] == [p.task_id for p in prompts]  # seeded
    assert [p.task_id for p in stdlib_prompts(7, skip=5, seed=4)] != [p.task_id for p in prompts]
    assert stdlib_prompts(0, skip=5) == []


class Counting:
    def __init__(self) -> None:
        self.advanced: dict[str, int] = {}
        self.phase = ""

    def begin(self, phase, total):
        self.phase = phase
        self.advanced[phase] = 0

    def advance(self, count=1, **info):
        self.advanced[self.phase] += count

    def end(self):
        pass


FUNCTIONS = [(f"stdlib/m.f{i}", f'def f{i}(a):\n    """{i} times a."""\n',
              f'def f{i}(a):\n    """{i} times a."""\n    return {i} * a\n') for i in range(6)]


def test_stdlib_prompts_are_answered_by_the_target_appended_and_resumed(monkeypatch, problems, tmp_path):
    from quench.models import encode_prompt
    from quench.training import distill as pipeline

    target = tiny_loaded("chat")
    monkeypatch.setattr(pipeline, "training_prompts", lambda limit: problems[:limit])
    monkeypatch.setattr(distill_data, "stdlib_functions", lambda limit, seed=0: FUNCTIONS[:limit])
    settings = DistillConfig(prompts=2, stdlib_functions=2, stdlib_prompts=2, max_new_tokens=6, max_tokens=96)
    first = pipeline.distillation_examples(target, settings, tmp_path, Counting())
    answers = read_examples(tmp_path / "answers.jsonl")
    assert [e.key for e in answers] == ["Tiny/0", "Tiny/1", "stdlib-answer/m.f2", "stdlib-answer/m.f3"]
    assert [e.key for e in first] == [e.key for e in answers] + ["stdlib/m.f0", "stdlib/m.f1"]
    assert answers[2].ids[: answers[2].answer_start] == encode_prompt(target, FUNCTIONS[2][1])  # the chat prompt
    assert all(len(e.ids) > e.answer_start for e in answers)

    progress = Counting()
    more = pipeline.distillation_examples(target, replace(settings, stdlib_prompts=3), tmp_path, progress)
    assert more[:4] == first[:4] and more[4].key == "stdlib-answer/m.f4" and progress.advanced["answers"] == 5
    assert len(read_examples(tmp_path / "answers.jsonl")) == 5  # only the new prompt was answered, and appended

    teachers = pipeline.targets_for(target, more, settings, tmp_path, Counting())
    real = [t for e, t in zip(more, teachers) if e.key.startswith("stdlib/")]
    answered = [t for e, t in zip(more, teachers) if e.key.startswith("stdlib-answer/")]
    assert all(torch.isinf(t.logprobs[:, 1:]).all() for t in real)  # labelled with their own tokens
    assert all(torch.isfinite(t.logprobs).all() for t in answered)  # labelled by the target, like MBPP answers


def test_held_out_figures_by_source_add_up_to_the_overall_figures(target, tmp_path):
    from quench.training.distill import evaluate_by_source

    examples = examples_of(target, SNIPPETS[:5], "MBPP") + examples_of(target, SNIPPETS[5:], "stdlib-answer")
    teachers = teacher_targets(target.model, examples, tmp_path, top_k=8)
    draft, head = build_draft(target.model, (0,)), HeadView(target.model.lm_head.weight, None)
    overall = evaluate(draft, head, examples, teachers)
    by_source = evaluate_by_source(draft, head, examples, teachers)
    assert [source for source, _ in by_source] == ["MBPP", "stdlib-answer"]
    positions = [sum(len(t.indices) for e, t in zip(examples, teachers) if e.key.startswith(s + "/")) for s, _ in by_source]
    weighted = sum(n * figures.agreement for n, (_, figures) in zip(positions, by_source)) / sum(positions)
    assert weighted == pytest.approx(overall.agreement)
    assert sum(n * f.kl for n, (_, f) in zip(positions, by_source)) / sum(positions) == pytest.approx(overall.kl)


def test_a_bfloat16_target_trains_under_autocast(tmp_path):
    """bfloat16 targets train with autocast: float16 teacher caches and float32 master weights must mix."""
    from helpers import tiny_llama

    target = tiny_loaded()
    target.model = tiny_llama(dtype=torch.bfloat16)
    train = examples_of(target, SNIPPETS[:4])
    teachers = teacher_targets(target.model, train, tmp_path / "t", top_k=8)
    draft = build_draft(target.model, (0,))
    head = HeadView(target.model.lm_head.weight, frequent_tokens(train, 30, always=[2]))
    train_draft(draft, head, train, teachers, config(epochs=1), tmp_path)
    assert all(p.dtype == torch.float32 for p in draft.parameters() if p.requires_grad)
    assert evaluate(draft, head, train, teachers).kl >= 0


def test_the_cli_turns_bad_settings_into_clear_errors():
    import argparse

    from quench.cli import draft as cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["draft", "train", "--layers", "0,-1", "--head-tokens", "4096"])
    assert cli.config_from_args(args).source_layers == (0, -1) and cli.config_from_args(args).head_tokens == 4096
    with pytest.raises(QuenchError, match="--layers"):
        cli.config_from_args(parser.parse_args(["draft", "train", "--layers", "first"]))
    with pytest.raises(QuenchError, match="epochs"):
        cli.config_from_args(parser.parse_args(["draft", "train", "--epochs", "0"]))


def test_sampled_answers_are_keyed_by_round_seeded_and_held_out_with_their_prompt(monkeypatch, problems, tmp_path):
    from quench.training import distill as pipeline
    from quench.training.distill_data import prompt_key
    from quench.training.distill_train import is_heldout

    assert prompt_key("sampled2/MBPP/12") == "MBPP/12" and prompt_key("MBPP/12") == "MBPP/12"
    assert prompt_key("sampledX/a") == "sampledX/a"  # only sampled<digits>/ is a round prefix
    target = tiny_loaded("chat")
    monkeypatch.setattr(pipeline, "training_prompts", lambda limit: problems[:limit])
    monkeypatch.setattr(distill_data, "stdlib_functions", lambda limit, seed=0: FUNCTIONS[:limit])
    settings = DistillConfig(prompts=3, stdlib_functions=1, stdlib_prompts=0, max_new_tokens=8, max_tokens=96,
                             sampled_answers=2, sample_temperature=1.0, seed=5)
    for name in "abc":
        (tmp_path / name).mkdir()
    examples = pipeline.distillation_examples(target, settings, tmp_path / "a", Counting())
    keys = [e.key for e in examples]
    assert keys == ["Tiny/0", "Tiny/1", "Tiny/2"] + [f"sampled{r}/Tiny/{i}" for r in (1, 2) for i in range(3)] + ["stdlib/m.f0"]
    greedy, sampled = read_examples(tmp_path / "a" / "answers.jsonl"), read_examples(tmp_path / "a" / "sampled.jsonl")
    assert sorted(e.key for e in sampled) == keys[3:9]
    sampled = sorted(sampled, key=lambda e: keys.index(e.key))
    assert all(s.ids[: s.answer_start] == g.ids[: g.answer_start] for s, g in zip(sampled, greedy * 2))  # same prompts
    assert any(s.ids != g.ids for s, g in zip(sampled, greedy * 2))  # sampled at temperature 1: not all greedy
    again = pipeline.distillation_examples(target, settings, tmp_path / "b", Counting())
    assert again == examples  # the same seed gives the same samples
    other = pipeline.distillation_examples(target, replace(settings, seed=6), tmp_path / "c", Counting())
    assert [e.ids for e in other[3:9]] != [e.ids for e in examples[3:9]]
    for every in (2, 3):  # a prompt's answers are all held out or all trained on
        for i in range(3):
            assert len({is_heldout(prompt_key(k), every) for k in keys if prompt_key(k) == f"Tiny/{i}"}) == 1
    with pytest.raises(ValueError, match="sample_temperature"):
        replace(settings, sample_temperature=0.0)
