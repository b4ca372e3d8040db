"""The shipped GenGuard on the default model, in the engine: fewer tokens, the same cleaned code."""

from __future__ import annotations

import pytest

from quench.datasets import load_humaneval
from quench.execution.sanitize import sanitize
from quench.engine.config import EngineConfig
from quench.runs.backends import BackendOptions, make_backend
from quench.engine.types import GenerationRequest, SamplingParams
from quench.models import encode_prompt, load_model

TASKS = ("HumanEval/2", "HumanEval/4")  # answers that explain their code after the block until EOS


@pytest.mark.slow
def test_guard_auto_saves_tokens_and_keeps_the_code() -> None:
    loaded = load_model()
    problems = [p for p in load_humaneval() if p.task_id in TASKS]
    requests = [GenerationRequest(p.task_id, encode_prompt(loaded, p.prompt)) for p in problems]
    sampling = SamplingParams(max_new_tokens=300)
    outputs = {}
    for guard in (None, "auto"):
        backend = make_backend(loaded, BackendOptions(engine=EngineConfig(batch_size=2), guard=guard))
        outputs[guard] = {r.key: r for r in backend.generate(requests, sampling)}
    for problem in problems:
        full, guarded = outputs[None][problem.task_id], outputs["auto"][problem.task_id]
        assert guarded.finish_reason == "guard"
        assert len(guarded.token_ids) < len(full.token_ids)
        assert full.token_ids[: len(guarded.token_ids)] == guarded.token_ids
        assert sanitize(problem, guarded.text, "chat").completion == sanitize(problem, full.text, "chat").completion
