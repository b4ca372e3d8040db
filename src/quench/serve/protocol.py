"""The OpenAI HTTP API's request bodies (as pydantic models), its error form and response shapes."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from quench.engine.logprobs import MAX_TOP, TokenLogprob

# quench's finish reasons (GenerationResult.finish_reason) as the API reports them. "guard" is quench's
# own: GenGuard (--guard) judged the rest of the answer excess and stopped the sample there.
FINISH_REASONS = {"eos": "stop", "stop": "stop", "hook": "stop", "length": "length", "guard": "guard"}


class APIError(Exception):
    """An error answered as OpenAI does: {"error": {"message", "type", "param", "code"}} with an HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.headers = headers or {}
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class StreamOptions(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    include_usage: bool = False


class SamplingFields(BaseModel):
    """What both endpoints take; fields of the API that quench does not implement are refused, not ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")
    model: str
    n: int = Field(1, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)  # an extension (vLLM has it too); 0: off
    ignore_eos: bool = False  # an extension (vLLM's): EOS ends nothing, the sample runs to max_tokens or a stop
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[str, float] | None = None

    def wanted_logprobs(self) -> int | None:
        """None: no log-probabilities; else each token's, with this many alternatives."""
        return None

    def unsupported(self) -> str | None:
        """The first field set to something quench cannot do, or None."""
        if self.presence_penalty or self.frequency_penalty:
            return "presence_penalty/frequency_penalty"
        if self.logit_bias:
            return "logit_bias"
        return None

    def stop_sequences(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        stops = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        return tuple(s for s in stops if s)


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int]
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP)  # each token's log-probability and this many alternatives
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None

    def wanted_logprobs(self) -> int | None:
        return self.logprobs

    def unsupported(self) -> str | None:
        if self.echo:
            return "echo"
        if self.best_of is not None and self.best_of != self.n:
            return "best_of"
        if self.suffix:
            return "suffix"
        return super().unsupported()


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[TextPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class ChatRequest(SamplingFields):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP)
    tools: list[Any] | None = None

    def wanted_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def unsupported(self) -> str | None:
        if self.tools:
            return "tools"
        return super().unsupported()


def parse_body(raw: bytes, model: type[BaseModel]) -> Any:
    """The request body as `model`, or APIError 400 naming what is wrong with it."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise APIError(400, f"the request body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise APIError(400, "the request body must be a JSON object")
    try:
        request = model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        raise APIError(400, f"{param}: {first['msg']}", param=param) from None
    unsupported = request.unsupported()
    if unsupported is not None:
        raise APIError(400, f"{unsupported}: not supported by this server", param=unsupported.split("/")[0])
    return request


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_choice(index: int, text: str, finish_reason: str | None,
                      logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}


def chat_choice(index: int, text: str, finish_reason: str | None, logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
            "finish_reason": finish_reason}


def chat_delta(index: int, text: str | None, finish_reason: str | None, first: bool = False,
               logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {"role": "assistant"} if first else {}
    if text is not None:
        delta["content"] = text
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}


def completion_logprobs(items: Sequence[TokenLogprob], text_of: Callable[[int], str], offset: int) -> dict[str, Any]:
    """The completions API's form: tokens, token_logprobs, top_logprobs (token -> logprob), text_offset.
    offset: characters before the first token (the prompt's, or what the stream sent before)."""
    tokens = [text_of(item.token) for item in items]
    offsets = [offset + sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
    tops = [{text_of(token): value for token, value in item.top} for item in items]
    return {"tokens": tokens, "token_logprobs": [item.logprob for item in items],
            "top_logprobs": tops if any(item.top for item in items) else None, "text_offset": offsets}


def chat_logprobs(items: Sequence[TokenLogprob], text_of: Callable[[int], str]) -> dict[str, Any]:
    """The chat API's form: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}."""

    def entry(token: int, value: float) -> dict[str, Any]:
        text = text_of(token)
        return {"token": text, "logprob": value, "bytes": list(text.encode())}

    return {"content": [{**entry(item.token, item.logprob), "top_logprobs": [entry(t, v) for t, v in item.top]}
                        for item in items], "refusal": None}


def envelope(kind: str, ident: str, model: str, choices: list[dict], extra: dict | None = None) -> dict[str, Any]:
    """A response or stream chunk: kind is "text_completion", "chat.completion" or "chat.completion.chunk"."""
    return {"id": ident, "object": kind, "created": int(time.time()), "model": model, "choices": choices,
            **(extra or {})}


def sse(payload: dict[str, Any] | str) -> str:
    """One server-sent event."""
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"
