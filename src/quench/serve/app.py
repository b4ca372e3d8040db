"""The HTTP routes: /v1/completions, /v1/chat/completions, /v1/models, /health and /metrics (FastAPI).

Each API request ends in one access-log line (`quench.serve.metrics`), a client that went away
included: its outcome says `disconnected`, with no traceback."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Sequence

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.requests import ClientDisconnect

from quench.engine.serving.live import EngineProcess, Finished, Tokens
from quench.engine.logprobs import TokenLogprob
from quench.serve import protocol
from quench.serve.metrics import RequestRecord
from quench.serve.protocol import APIError, ChatRequest, CompletionRequest
from quench.serve.service import Job, Service

log = logging.getLogger(__name__)

DISCONNECT_POLL_S = 0.5  # a client that leaves a request without a stream is noticed this soon
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text exposition format


def make_app(service: Service) -> FastAPI:
    """The app; its shutdown stops the engine (after uvicorn let in-flight requests finish)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        service.engine.stop()

    app = FastAPI(title="quench", lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)

    @app.exception_handler(APIError)
    async def api_error(request: Request, err: APIError) -> JSONResponse:
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        log.exception("request to %s failed", request.url.path)
        return JSONResponse(APIError(500, f"internal error: {err}", kind="server_error").body(), status_code=500)

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 while the engine takes requests; 503 while it does not (shutting down, restarting, or its thread died)."""
        if service.engine.accepting():
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "unavailable"}, status_code=503)

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        engine = service.engine
        channel = engine.channel if isinstance(engine, EngineProcess) else None
        return PlainTextResponse(service.metrics.text(engine.gauges(), channel), media_type=METRICS_TYPE)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": service.config.model_name, "object": "model", "created": int(time.time()),
                "owned_by": "quench", "max_model_len": service.config.max_model_len}
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await answer(service, request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await answer(service, request, chat=True)

    return app


async def answer(service: Service, request: Request, chat: bool):
    """One API request, from its body to its answer, and its access-log line once it ends."""
    record = RequestRecord(protocol.new_id("chatcmpl" if chat else "cmpl"))
    try:
        raw = await read_body(request, service.config.max_body_bytes)
        body = protocol.parse_body(raw, ChatRequest if chat else CompletionRequest)
        jobs = service.chat_jobs(body) if chat else service.completion_jobs(body)
        record.prompt_tokens = sum(len(job.request.prompt_ids) for job in jobs)
        response = await respond(service, request, jobs, body, chat, record)
    except APIError as err:
        record.outcome = "disconnected" if err.status == 499 else "refused" if err.status < 500 else "error"
        service.metrics.record(record, err.status)
        raise
    except BaseException:
        record.outcome = "error"
        service.metrics.record(record, 500)
        raise
    if not isinstance(response, StreamingResponse):  # a stream records itself when it ends
        service.metrics.record(record, 200)
    return response


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or APIError 413 as soon as it is known to exceed `limit` bytes (from its
    Content-Length, else while it arrives); 499 if the client leaves while sending it."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"the request body has {declared} bytes, more than this server's limit of {limit}")
    parts, size = [], 0
    try:
        async for part in request.stream():
            size += len(part)
            if size > limit:
                raise APIError(413, f"the request body is larger than this server's limit of {limit} bytes")
            parts.append(part)
    except ClientDisconnect:
        raise APIError(499, "client disconnected") from None
    return b"".join(parts)


async def respond(service: Service, request: Request, jobs: Sequence[Job], body: Any, chat: bool,
                  record: RequestRecord):
    ident = record.ident
    if body.stream:
        events = service.events(jobs, record)
        # the first event before the headers: queue errors (429, 503) are still an HTTP status, not a stream event
        first = await until_disconnect(request, anext(events))
        return StreamingResponse(stream(service, jobs, events, first, record, body, chat),
                                 media_type="text/event-stream")
    return await until_disconnect(request, collect_response(service, jobs, ident, chat, record))


async def until_disconnect(request: Request, work):
    """Await `work`, cancelling it if the client goes away first (which closes `Service.events` and
    so cancels the engine requests)."""
    task = asyncio.ensure_future(work)
    while not task.done():
        await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
        if not task.done() and await request.is_disconnected():
            task.cancel()
            raise APIError(499, "client disconnected")
    return task.result()


async def collect_response(service: Service, jobs: Sequence[Job], ident: str, chat: bool,
                           record: RequestRecord) -> dict[str, Any]:
    """The whole answer at once."""
    choices, completion_tokens = await collect(service, jobs, chat, record)
    prompt_tokens = sum(len(job.request.prompt_ids) for job in jobs)
    return protocol.envelope("chat.completion" if chat else "text_completion", ident, service.config.model_name,
                             [choices[i] for i in sorted(choices)],
                             {"usage": protocol.usage(prompt_tokens, completion_tokens)})


async def collect(service: Service, jobs: Sequence[Job], chat: bool,
                  record: RequestRecord) -> tuple[dict[int, dict[str, Any]], int]:
    """Every finished sample as an API choice (by choice index), and the tokens generated."""
    n = jobs[0].request.n
    choices: dict[int, dict[str, Any]] = {}
    completion_tokens = 0
    make = protocol.chat_choice if chat else protocol.completion_choice
    async for index, event in service.events(jobs, record):
        if isinstance(event, Finished):
            result = event.result
            choice = index * n + result.sample_index
            job = jobs[index]
            choices[choice] = make(choice, result.text, protocol.FINISH_REASONS.get(result.finish_reason, "stop"),
                                   logprobs_of(service, job, within(service, event.logprobs, result.text), chat,
                                               job.text_offset))
            completion_tokens += len(result.token_ids)
    return choices, completion_tokens


def logprobs_of(service: Service, job: Job, items: Sequence[TokenLogprob] | None, chat: bool,
                offset: int) -> dict[str, Any] | None:
    """A choice's (or a chunk's) logprobs in the API's form; None where the request did not ask for them."""
    if job.top_logprobs is None or items is None:
        return None
    if chat:
        return protocol.chat_logprobs(items, service.token_text)
    return protocol.completion_logprobs(items, service.token_text, offset)


def within(service: Service, items: Sequence[TokenLogprob] | None, text: str) -> Sequence[TokenLogprob] | None:
    """The leading entries whose tokens lie inside the answer's `text` (a stop sequence may have cut it)."""
    if items is None:
        return None
    end = 0
    for count, item in enumerate(items):
        end += len(service.token_text(item.token))
        if end > len(text):
            return items[:count]
    return items


class ChoiceLogprobs:
    """A streamed choice's log-probabilities: those of tokens received, sent with the next text delta."""

    def __init__(self, service: Service, job: Job, chat: bool) -> None:
        self.service, self.job, self.chat = service, job, chat
        self.received: list[TokenLogprob] = []
        self.sent = 0
        self.offset = job.text_offset  # characters before the next token (completions' text_offset)

    def take(self, final: Sequence[TokenLogprob] | None = None) -> dict[str, Any] | None:
        """What the next chunk carries: the received ones not sent yet (or, at the end, the rest of `final`)."""
        items = list(final[self.sent:]) if final is not None else self.received[self.sent:]
        self.sent += len(items)
        part = logprobs_of(self.service, self.job, items, self.chat, self.offset)
        self.offset += sum(len(self.service.token_text(item.token)) for item in items) if part and not self.chat else 0
        return part


async def stream(service: Service, jobs: Sequence[Job], events: AsyncIterator, first: tuple, record: RequestRecord,
                 body: Any, chat: bool) -> AsyncIterator[str]:
    """Server-sent events: text deltas per choice as the engine commits tokens, then finish reasons.
    A client that goes away cancels this generator, and with it the request's rows (`Service.events`);
    either way the request's access-log line is written when it ends."""
    record.outcome = "disconnected"  # until the last event is out
    try:
        async for event in stream_events(service, jobs, events, first, record, body, chat):
            yield event
        if record.outcome == "disconnected":
            record.outcome = "ok"
    finally:
        service.metrics.record(record, 200)


async def stream_events(service: Service, jobs: Sequence[Job], events: AsyncIterator, first: tuple,
                        record: RequestRecord, body: Any, chat: bool) -> AsyncIterator[str]:
    ident = record.ident
    n = jobs[0].request.n
    kind = "chat.completion.chunk" if chat else "text_completion"
    model = service.config.model_name
    texts = {(j, s): service.stream_for(job) for j, job in enumerate(jobs) for s in range(job.request.n)}
    scores = {(j, s): ChoiceLogprobs(service, job, chat) for j, job in enumerate(jobs) for s in range(job.request.n)}
    opened: set[int] = set()
    completion_tokens = 0

    def chunk(choice: int, text: str | None, reason: str | None, logprobs: dict[str, Any] | None) -> str:
        if chat:
            part = protocol.chat_delta(choice, text, reason, first=choice not in opened, logprobs=logprobs)
            opened.add(choice)
        else:
            part = protocol.completion_choice(choice, text or "", reason, logprobs)
        extra = {"usage": None} if body.stream_options and body.stream_options.include_usage else None
        return protocol.sse(protocol.envelope(kind, ident, model, [part], extra))

    try:
        pending = [first]
        while True:
            for index, event in pending:
                if isinstance(event, Tokens):
                    scores[index, event.sample_index].received.extend(event.logprobs or ())
                    delta = texts[index, event.sample_index].push(event.token_ids)
                    if delta:
                        yield chunk(index * n + event.sample_index, delta, None, scores[index, event.sample_index].take())
                elif isinstance(event, Finished):
                    result = event.result
                    completion_tokens += len(result.token_ids)
                    delta = texts[index, result.sample_index].finish(result.text)
                    reason = protocol.FINISH_REASONS.get(result.finish_reason, "stop")
                    logprobs = scores[index, result.sample_index].take(within(service, event.logprobs, result.text) or ())
                    yield chunk(index * n + result.sample_index, delta, reason, logprobs)
            try:
                pending = [await anext(events)]
            except StopAsyncIteration:
                break
    except APIError as err:  # the engine failed or is shutting down: say so in the stream
        record.outcome = "error"
        yield protocol.sse(err.body())
    finally:
        await events.aclose()
    if body.stream_options and body.stream_options.include_usage:
        prompt_tokens = sum(len(job.request.prompt_ids) for job in jobs)
        yield protocol.sse(protocol.envelope(kind, ident, model, [],
                                             {"usage": protocol.usage(prompt_tokens, completion_tokens)}))
    yield protocol.sse("[DONE]")
