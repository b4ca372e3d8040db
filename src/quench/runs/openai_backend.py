"""`--backend openai`: generation by any OpenAI-compatible server (vLLM, TGI, llama.cpp, SGLang, `quench serve`).

Prompts travel as text: the server tokenizes. A request's `prompt_ids` are the code points of the text
sent (`encode`), so run-level code that keys, resumes and records requests works unchanged. The chat
format sends quench's user turn (`chat_message`) to /v1/chat/completions; the completion format sends
the prompt itself to /v1/completions.

Requests run `concurrency` at a time; 429, 5xx, timeouts and broken connections are retried with
exponential backoff (or the server's Retry-After); other errors stop the run at once. Each finished
sample is yielded as soon as its request returns, so what is done is on disk before any error.
The API key is read from the environment variable named in the options and kept only in the
request headers: never in the options, config.json, logs or reports.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import httpx

from quench.engine.types import GenerationRequest, GenerationResult, SamplingParams, cut_at_stop
from quench.errors import QuenchError
from quench.models.prompts import chat_instruction, fenced

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
RETRY_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
MAX_BACKOFF_S = 30.0


@dataclass(frozen=True)
class OpenAIOptions:
    """Where and how to reach the server; picklable, and holding no secret (only the key's variable name)."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: str  # the name the server knows the model by
    prompt_format: str = "chat"  # "chat": /v1/chat/completions; "completion": /v1/completions
    api_key_env: str | None = None  # environment variable holding the API key (None: no key is sent)
    concurrency: int = 8  # requests in flight at once
    timeout_s: float = 600.0  # per request, connection to last byte
    max_retries: int = 5  # tries after the first, on 429, 5xx, timeouts and broken connections
    backoff_s: float = 1.0  # the first wait; doubled after every failed try
    use_n: bool = True  # ask for n samples in one request (else one request per sample, distinct seeds)

    def check(self) -> "OpenAIOptions":
        if not self.base_url.startswith(("http://", "https://")):
            raise QuenchError(f"--base-url {self.base_url!r}: must start with http:// or https://")
        if self.prompt_format not in ("chat", "completion"):
            raise QuenchError(f"--prompt-format {self.prompt_format!r}: choose chat or completion")
        if self.api_key_env is not None and not os.environ.get(self.api_key_env):
            raise QuenchError(f"--api-key-env {self.api_key_env}: that environment variable is not set")
        if self.concurrency < 1:
            raise QuenchError(f"--concurrency must be at least 1, got {self.concurrency}")
        if self.max_retries < 0:
            raise QuenchError(f"--max-retries must be >= 0, got {self.max_retries}")
        return self


@dataclass(frozen=True)
class RemoteModel:
    """What the CLI knows of a model behind a server (nothing loads): its name and prompt format."""

    name: str
    prompt_format: str
    source: str  # the server's base URL
    dtype: str = "remote"

    def format(self, prompt: str) -> str:
        """The text sent: quench's chat user turn, or the prompt itself."""
        return chat_message(prompt) if self.prompt_format == "chat" else prompt

    def encode(self, prompt: str) -> tuple[int, ...]:
        return encode(self.format(prompt))


def chat_message(prompt: str) -> str:
    """The user turn `quench.models.format_prompt` puts into the chat template."""
    return chat_instruction(prompt) + fenced(prompt)


def encode(text: str) -> tuple[int, ...]:
    """A request's `prompt_ids` for this backend: the text's code points."""
    return tuple(ord(c) for c in text)


def decode(ids: Iterable[int]) -> str:
    return "".join(chr(i) for i in ids)


def request_seed(seed: int, key: str, first_sample: int) -> int:
    """The server seed of one request: distinct per (run seed, request key, first sample)."""
    digest = hashlib.blake2b(f"{seed}/{key}/{first_sample}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


class ServerError(QuenchError):
    """The server refused a request (4xx other than 429), or kept failing past the retries."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status of a refusal


@dataclass(frozen=True)
class Call:
    """One HTTP request: samples first..first+n-1 of a request."""

    request: GenerationRequest
    first: int
    n: int


class OpenAIBackend:
    """The `Backend` protocol over an OpenAI-compatible HTTP server."""

    name = "openai"

    def __init__(self, options: OpenAIOptions, transport: httpx.BaseTransport | None = None) -> None:
        self.options = options.check()
        headers = {}
        if options.api_key_env is not None:
            headers["Authorization"] = f"Bearer {os.environ[options.api_key_env]}"
        self.client = httpx.Client(base_url=options.base_url.rstrip("/"), headers=headers,
                                   timeout=options.timeout_s, transport=transport)
        self.use_n = options.use_n  # turned off for good when the server does not honour `n`
        self.served_models: set[str] = set()  # model names the server answered with
        self._stopping = False

    def close(self) -> None:
        self.client.close()

    def generate(self, requests: Iterable[GenerationRequest], sampling: SamplingParams) -> Iterator[GenerationResult]:
        """Yield each sample as its request returns. After a request fails for good nothing new is sent,
        the requests in flight finish and are yielded, then the error is raised: nothing done is lost."""
        calls = deque(call for request in requests for call in self._calls(request))
        pool = ThreadPoolExecutor(self.options.concurrency, thread_name_prefix="quench-openai")
        running: set[Future] = set()
        error: BaseException | None = None
        complete = False
        try:
            while running or (calls and error is None):
                while calls and error is None and len(running) < self.options.concurrency:
                    running.add(pool.submit(self._send, calls.popleft(), sampling))
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    if future.exception() is not None:
                        error = error or future.exception()
                    else:
                        yield from future.result()
            complete = True
        finally:
            if not complete:  # the caller stopped early (an interrupt): abandon what is in flight
                self._stopping = True
                self.client.close()
            pool.shutdown(wait=complete, cancel_futures=True)
        if error is not None:
            raise error

    def _calls(self, request: GenerationRequest) -> list[Call]:
        if self.use_n:
            return [Call(request, request.sample_offset, request.n)]
        return [Call(request, request.sample_offset + i, 1) for i in range(request.n)]

    def _send(self, call: Call, sampling: SamplingParams) -> list[GenerationResult]:
        """One call's samples; where the server does not honour `n`, one request per sample instead."""
        if call.n > 1 and self.use_n:
            try:
                results = self._send_once(call, sampling)
                if len(results) == call.n:
                    return results
            except ServerError as err:
                if err.status != 400:
                    raise
            log.warning("%s: no n > 1 in one request; asking for each sample on its own", self.options.base_url)
            self.use_n = False
        if call.n > 1:
            return [r for i in range(call.n) for r in self._send_once(Call(call.request, call.first + i, 1), sampling)]
        return self._send_once(call, sampling)

    def _send_once(self, call: Call, sampling: SamplingParams) -> list[GenerationResult]:
        started = time.perf_counter()
        answer = self._post_with_retries(self._path(), self._body(call, sampling), call)
        if not isinstance(answer.get("choices"), list) or not answer["choices"]:
            raise ServerError(f"{self.options.base_url}: the answer for {call.request.key!r} holds no choices")
        return self._results(call, answer, time.perf_counter() - started)

    def _path(self) -> str:
        return "/chat/completions" if self.options.prompt_format == "chat" else "/completions"

    def _body(self, call: Call, sampling: SamplingParams) -> dict[str, Any]:
        text = decode(call.request.prompt_ids)
        body: dict[str, Any] = {"model": self.options.model, "max_tokens": sampling.max_new_tokens,
                                "temperature": sampling.temperature, "top_p": sampling.top_p, "n": call.n,
                                "seed": request_seed(sampling.seed, call.request.key, call.first)}
        if sampling.top_k:
            body["top_k"] = sampling.top_k  # not in OpenAI's API; vLLM and quench serve take it
        if call.request.stop_sequences:
            body["stop"] = list(call.request.stop_sequences)
        if self.options.prompt_format == "chat":
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        return body

    def _post_with_retries(self, path: str, body: dict[str, Any], call: Call) -> dict[str, Any]:
        wait_s, last = self.options.backoff_s, ""
        for attempt in range(self.options.max_retries + 1):
            if self._stopping:
                raise ServerError(f"{self.options.base_url}: stopped before {call.request.key!r} was sent")
            try:
                response = self.client.post(path, json=body)
            except RETRY_ERRORS as err:
                last = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
            else:
                if response.status_code == 200:
                    return self._json(response, call)
                last = f"HTTP {response.status_code}: {error_message(response)}"
                if response.status_code not in RETRY_STATUSES:
                    raise ServerError(f"{self.options.base_url}{path}: the server refused {call.request.key!r}: {last}",
                                      response.status_code)
                wait_s = retry_after(response, wait_s)
            if attempt < self.options.max_retries:
                log.warning("%s%s: %s; retrying %r in %.1f s", self.options.base_url, path, last, call.request.key, wait_s)
                time.sleep(wait_s)
                wait_s = min(wait_s * 2, MAX_BACKOFF_S)
        raise ServerError(f"{self.options.base_url}{path}: {call.request.key!r} failed {self.options.max_retries + 1} "
                          f"times (last: {last}); the samples finished before are saved, run again to continue")

    def _json(self, response: httpx.Response, call: Call) -> dict[str, Any]:
        try:
            answer = response.json()
        except ValueError:
            raise ServerError(f"{self.options.base_url}: the answer for {call.request.key!r} is not JSON") from None
        if not isinstance(answer, dict):
            raise ServerError(f"{self.options.base_url}: the answer for {call.request.key!r} is not a JSON object")
        return answer

    def _results(self, call: Call, answer: dict[str, Any], seconds: float) -> list[GenerationResult]:
        model = str(answer.get("model", ""))
        self.served_models.add(model)
        usage = answer.get("usage") or {}
        extra: dict[str, float | str] = {"server_model": model}
        if "completion_tokens" in usage:  # the request's usage, shared evenly by its samples
            extra["completion_tokens"] = usage["completion_tokens"] / call.n
            extra["prompt_tokens"] = float(usage.get("prompt_tokens", 0))
        results = []
        for choice in sorted(answer["choices"], key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0):
            try:
                raw = choice["message"]["content"] if self.options.prompt_format == "chat" else choice["text"]
            except (KeyError, TypeError):
                raise ServerError(f"{self.options.base_url}: a choice for {call.request.key!r} holds no text") from None
            text, stopped = cut_at_stop(raw or "", call.request.stop_sequences)  # in case the server ignores stop
            reason = "stop" if stopped else str(choice.get("finish_reason") or "stop")
            results.append(GenerationResult(call.request.key, call.first + len(results), (), text, reason,
                                            seconds / call.n, dict(extra)))
        return results


def error_message(response: httpx.Response) -> str:
    """The server's error message (OpenAI's {"error": {"message"}} form), else the start of its body."""
    try:
        error = response.json().get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    except (ValueError, AttributeError):
        pass
    return response.text[:200]


def retry_after(response: httpx.Response, default: float) -> float:
    """The wait the server asks for (Retry-After, in seconds), else `default`."""
    try:
        return min(float(response.headers.get("retry-after", default)), MAX_BACKOFF_S)
    except ValueError:
        return default
