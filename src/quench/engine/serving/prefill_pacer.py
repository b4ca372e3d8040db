"""How many prompt tokens one admission of the live loop may prefill while rows decode, so that no decode
step waits for arrivals' prefill more than a stated share of its own time.

The loop measures, as it runs, a decode step's seconds and a prefilled prompt token's seconds (running
averages). While any row decodes, an admission prefills at most

    allowance = clamp(share * step_s / token_s, MIN_CHUNK, budget)

prompt tokens: the prefill between two decode steps takes about `share` of a step, so a running row's
inter-token latency stays within (1 + share) steps, plus at most one MIN_CHUNK chunk. Prompts longer than
the allowance go in chunks over the next steps (`quench.engine.serving.chunked_prefill`); a prompt the
runner cannot split exactly still goes whole. While no row decodes the whole budget applies. Chunk sizes
change no output (chunks run only where the runner promises a whole prefill's bits).
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_CHUNK = 16  # prompt tokens an admission may always prefill, so arrivals progress whatever the estimates
SMOOTHING = 0.25  # weight of the newest measurement in the running averages


def allowance(share: float, step_s: float, token_s: float, budget: int) -> int:
    """Prompt tokens an admission may prefill: about `share` of a `step_s` decode step at `token_s` a token."""
    if token_s <= 0:
        return budget
    return max(MIN_CHUNK, min(budget, int(share * step_s / token_s)))


@dataclass
class PrefillPacer:
    share: float  # an admission's prefill takes at most this share of a decode step's time (estimated)
    budget: int  # prompt tokens per admission, at most, in any case
    step_s: float | None = None  # running average: seconds of a decode step
    token_s: float | None = None  # running average: seconds of one prefilled prompt token

    def tokens(self, decoding: bool) -> int:
        """The prefill allowance of the next admission (the whole budget until both averages exist)."""
        if not decoding or self.step_s is None or self.token_s is None:
            return self.budget
        return allowance(self.share, self.step_s, self.token_s, self.budget)

    def prefilled(self, tokens: int, seconds: float) -> None:
        if tokens > 0:
            self.token_s = running(self.token_s, seconds / tokens)

    def stepped(self, seconds: float) -> None:
        self.step_s = running(self.step_s, seconds)


def running(average: float | None, value: float) -> float:
    return value if average is None else (1 - SMOOTHING) * average + SMOOTHING * value
