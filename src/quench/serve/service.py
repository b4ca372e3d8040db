"""Between HTTP and the engine (its process, or its thread): prompts to token ids, API fields to engine requests,
events to asyncio."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Callable, Sequence

from quench.engine.serving.live import (PREFILL_BUDGET, EngineProcess, EngineStopped, Failed, Finished, LiveEngine, LiveEvent,
                                        QueueFull, Tokens)
from quench.engine.types import GenerationRequest, SamplingParams
from quench.serve.metrics import Metrics, RequestRecord
from quench.serve.protocol import APIError, ChatRequest, CompletionRequest, Message, SamplingFields

COMPLETION_MAX_TOKENS = 16  # the API's default for /v1/completions; chat defaults to the rest of the context
MAX_BODY_BYTES = 4 << 20  # a request body larger than this is refused (413) before it is read
# a full queue's 429 asks the client to come back after this long: about one decode step per slot
# of a small model's batch, so a retry usually finds room without hammering the server
RETRY_AFTER_S = 1
# how much text a token may stand for, over its vocabulary entry's bytes: a normalizer may shrink the
# text it reads (NFKC maps the 3-byte ligature "ﬁ" to the 2 bytes of "fi")
NORMALIZER_SLACK = 2


@dataclass(frozen=True)
class ServeConfig:
    model_name: str  # what /v1/models lists and requests must name
    max_model_len: int  # prompt + generated tokens of one sample, at most
    max_n: int = 64  # samples per request, at most
    max_waiting: int = 256  # requests queued before the engine starts them; past that: 429
    shutdown_timeout: float = 30.0  # SIGTERM: seconds in-flight requests get to finish before they are cancelled
    max_body_bytes: int = MAX_BODY_BYTES  # larger request bodies: 413 before they are read
    prefill_budget: int = PREFILL_BUDGET  # prompt tokens prefilled per decode step (quench.engine.serving.live)
    prefill_share: float | None = None  # while rows decode, prefill paced to this share of a step (prefill_pacer)


@dataclass(frozen=True)
class Job:
    """One prompt of an API request, ready for the engine."""

    request: GenerationRequest
    sampling: SamplingParams
    top_logprobs: int | None = None  # None: no log-probabilities; else this many alternatives per token
    text_offset: int = 0  # characters of the prompt text (the completions API's logprobs count from there)


class TextStream:
    """A sample's text as it grows: new tokens in, the text safe to send out.

    Held back: a trailing partial UTF-8 character, and as many characters as a stop sequence could
    still need (the engine cuts the stop text, so text sent early could end up past the cut)."""

    def __init__(self, decode: Callable[[list[int]], str], stops: Sequence[str]) -> None:
        self.decode = decode
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.tokens: list[int] = []
        self.sent = ""

    def push(self, token_ids: Sequence[int]) -> str:
        self.tokens.extend(token_ids)
        text = self.decode(self.tokens).rstrip("\ufffd")
        safe = text[: len(text) - self.hold] if self.hold else text
        return self._advance(safe)

    def finish(self, text: str) -> str:
        return self._advance(text)

    def _advance(self, text: str) -> str:
        if len(text) <= len(self.sent) or not text.startswith(self.sent):
            return ""
        delta, self.sent = text[len(self.sent):], text
        return delta


class Service:
    """Turns validated API requests into engine jobs and streams their events back."""

    def __init__(self, engine: EngineProcess | LiveEngine, tokenizer: Any, config: ServeConfig) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.config = config
        self.max_token_bytes = NORMALIZER_SLACK * longest_token_bytes(tokenizer)
        self.metrics = Metrics()

    def check_common(self, body: SamplingFields) -> None:
        if body.model != self.config.model_name:
            raise APIError(404, f"the model `{body.model}` does not exist; this server serves "
                                f"`{self.config.model_name}`", param="model", code="model_not_found")
        if body.n > self.config.max_n:
            raise APIError(400, f"n: at most {self.config.max_n} samples per request, got {body.n}", param="n")

    def completion_jobs(self, body: CompletionRequest) -> list[Job]:
        self.check_common(body)
        if isinstance(body.prompt, str) or (body.prompt and isinstance(body.prompt[0], int)):
            prompts = [body.prompt]
        else:
            prompts = list(body.prompt)
        if not prompts:
            raise APIError(400, "prompt: must not be empty", param="prompt")
        ids = [self.encode_text(p) if isinstance(p, str) else self.check_ids(p) for p in prompts]
        jobs = [self.job(prompt_ids, body, body.max_tokens, COMPLETION_MAX_TOKENS) for prompt_ids in ids]
        if body.logprobs is None:
            return jobs
        offsets = [len(p) if isinstance(p, str) else len(self.decode(list(i))) for p, i in zip(prompts, ids)]
        return [replace(job, text_offset=offset) for job, offset in zip(jobs, offsets)]

    def chat_jobs(self, body: ChatRequest) -> list[Job]:
        self.check_common(body)
        if body.top_logprobs is not None and not body.logprobs:
            raise APIError(400, "top_logprobs: needs logprobs: true", param="top_logprobs")
        prompt_ids = self.encode_chat(body.messages)
        return [self.job(prompt_ids, body, body.max_completion_tokens or body.max_tokens, None)]

    def check_bytes(self, size: int) -> None:
        """APIError 400 for text of `size` UTF-8 bytes that no `max_model_len` tokens can hold: no token
        stands for more than `max_token_bytes` bytes of it (a tokenizer whose normalizer deletes characters
        outright could break that; code models' byte-level BPE has none). Costs nothing next to tokenizing."""
        limit = self.config.max_model_len
        if size > limit * self.max_token_bytes:
            raise APIError(400, f"this model's maximum context length is {limit} tokens; the prompt has {size} "
                                f"bytes, more than {limit} tokens of at most {self.max_token_bytes} bytes can hold",
                           param="prompt", code="context_length_exceeded")

    def encode_text(self, prompt: str) -> tuple[int, ...]:
        """As `quench generate` encodes a completion-format prompt."""
        self.check_bytes(len(prompt.encode("utf-8", "surrogatepass")))
        ids = tuple(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        if not ids:
            raise APIError(400, "prompt: must not be empty", param="prompt")
        return ids

    def check_ids(self, ids: Sequence[int]) -> tuple[int, ...]:
        vocab = len(self.tokenizer)
        if not ids or any(not 0 <= i < vocab for i in ids):
            raise APIError(400, f"prompt: token ids must be a non-empty list of ids in [0, {vocab})", param="prompt")
        return tuple(ids)

    def encode_chat(self, messages: Sequence[Message]) -> tuple[int, ...]:
        """The model's chat template with the assistant turn opened (as `quench generate` does for chat)."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise APIError(400, f"messages: the model `{self.config.model_name}` has no chat template; "
                                "use /v1/completions", param="messages")
        self.check_bytes(sum(len(m.text().encode("utf-8", "surrogatepass")) for m in messages))
        turns = [{"role": m.role if m.role != "developer" else "system", "content": m.text()} for m in messages]
        text = self.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def job(self, prompt_ids: tuple[int, ...], body: SamplingFields, max_tokens: int | None,
            default_max: int | None) -> Job:
        limit = self.config.max_model_len
        room = limit - len(prompt_ids)
        wanted = max_tokens or (min(default_max, room) if default_max is not None else room)
        if room < 1 or wanted > room:
            raise APIError(400, f"this model's maximum context length is {limit} tokens; the prompt has "
                                f"{len(prompt_ids)} and max_tokens asks for {wanted if room >= 1 else 'at least 1'} "
                                "more", param="max_tokens" if room >= 1 else "prompt", code="context_length_exceeded")
        # each row's generator is seeded from the key: one seed gives the same samples whatever the batch
        key = f"seed:{body.seed}" if body.seed is not None else f"request:{uuid.uuid4().hex}"
        request = GenerationRequest(key, prompt_ids, body.n, body.stop_sequences())
        return Job(request, SamplingParams(body.temperature, body.top_p, body.top_k, wanted, seed=0,
                                         ignore_eos=body.ignore_eos), body.wanted_logprobs())

    async def events(self, jobs: Sequence[Job], record: RequestRecord | None = None
                     ) -> AsyncIterator[tuple[int, LiveEvent]]:
        """(job index, event) until every sample of every job finished; cancels what is left if closed early.
        record: notes each sample's token arrivals and finish reason (the access log and metrics)."""
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[tuple[int, LiveEvent]] = asyncio.Queue()
        tickets: list[int] = []
        remaining = sum(job.request.n for job in jobs)
        try:
            for index, job in enumerate(jobs):
                sink = (lambda i: lambda event: loop.call_soon_threadsafe(inbox.put_nowait, (i, event)))(index)
                tickets.append(self.submit(job, sink))
            while remaining:
                index, event = await inbox.get()
                if isinstance(event, Failed):
                    raise APIError(500 if "shutting down" not in event.message else 503, event.message,
                                   kind="server_error")
                remaining -= isinstance(event, Finished)
                if record is not None:
                    note(record, index, event)
                yield index, event
        finally:
            if remaining:
                for ticket in tickets:
                    self.engine.cancel(ticket)

    def submit(self, job: Job, sink: Callable[[LiveEvent], None]) -> int:
        try:
            return self.engine.submit(job.request, job.sampling, sink, job.top_logprobs)
        except QueueFull as err:
            raise APIError(429, f"the server is busy: {err}; retry later", kind="rate_limit_exceeded",
                           headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        except EngineStopped as err:
            raise APIError(503, str(err), kind="server_error") from None

    def stream_for(self, job: Job) -> TextStream:
        return TextStream(self.decode, job.request.stop_sequences)

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def token_text(self, token_id: int) -> str:
        """One token's text, as the logprobs of an answer name it."""
        return self.tokenizer.decode([token_id])


def note(record: RequestRecord, index: int, event: LiveEvent) -> None:
    """Add an engine event of job `index` to the request's record."""
    if isinstance(event, Tokens):
        record.tokens((index, event.sample_index), len(event.token_ids))
    elif isinstance(event, Finished):
        result = event.result
        key = (index, result.sample_index)
        if key not in record.last_token:  # finished with tokens no Tokens event carried (e.g. at once)
            record.tokens(key, len(result.token_ids))
        record.completion_tokens += len(result.token_ids)
        record.finish_reasons.append(result.finish_reason)


def longest_token_bytes(tokenizer: Any) -> int:
    """The UTF-8 bytes of the vocabulary's longest entry (at least 1): no token stands for more text.
    Entries are spelled as stored (byte-level BPE's "Ġ" for a space, "<0x41>" for a byte), which only
    overstates a token's text."""
    vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    return max((len(token.encode("utf-8", "surrogatepass")) for token in vocab), default=16) or 1
