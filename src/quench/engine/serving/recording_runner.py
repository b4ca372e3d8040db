"""`RecordingRunner`: the live loop's target runner, which keeps a step's logits only for steps where a row asked for
log-probabilities (`quench.engine.logprobs`), so other requests do not pay for them."""

from __future__ import annotations

import torch

from quench.engine.logprobs import ScoringRunner


class RecordingRunner(ScoringRunner):
    """A `ScoringRunner` that keeps a step's logits only while `recording` (a row of the step asked for
    log-probabilities); otherwise every call goes straight to the runner it wraps."""

    recording = False

    def forward(self, cache, tokens: torch.Tensor, start: torch.Tensor, **kwargs):
        if not self.recording:
            return self.runner.forward(cache, tokens, start, **kwargs)
        return super().forward(cache, tokens, start, **kwargs)

    def greedy_tokens(self, cache, tokens: torch.Tensor, start: torch.Tensor, counts=None) -> torch.Tensor:
        if not self.recording:
            return self.runner.greedy_tokens(cache, tokens, start, counts=counts)
        return super().greedy_tokens(cache, tokens, start, counts=counts)

    def packed_logits(self, cache, tokens: torch.Tensor, start: torch.Tensor, counts=None) -> torch.Tensor:
        if not self.recording:
            return self.runner.packed_logits(cache, tokens, start, counts=counts)
        return super().packed_logits(cache, tokens, start, counts=counts)
