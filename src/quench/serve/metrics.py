"""The operator's view of `quench serve`: one access-log line per request and Prometheus `/metrics`.

Counters and histograms are updated on the asyncio thread as each request ends (`Metrics.record`);
gauges (requests running and waiting, KV-cache use) are the engine's when `/metrics` is scraped (an
engine process's as of its last step message, with its pipe's counters). The text is Prometheus' exposition format 0.0.4, written here (no client library needed).
"""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass, field

from quench.engine.serving.engine_process import ChannelStats
from quench.engine.serving.gauges import EngineGauges

log = logging.getLogger("quench.serve.access")

PREFIX = "quench"
# seconds: first tokens wait for a prefill and a queue, so their buckets reach minutes; tokens after
# the first come one decode step apart
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
ITL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
E2E_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


@dataclass
class RequestRecord:
    """What one API request did, for its access-log line and the metrics."""

    ident: str
    started: float = field(default_factory=time.perf_counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_token: float | None = None  # perf_counter of the first token of any of its samples
    last_token: dict[tuple[int, int], float] = field(default_factory=dict)  # (job, sample) -> time of its last tokens
    gaps: list[float] = field(default_factory=list)  # seconds between consecutive tokens of a sample
    finish_reasons: list[str] = field(default_factory=list)
    outcome: str = "ok"  # ok, disconnected, error, refused

    def tokens(self, key: tuple[int, int], count: int) -> None:
        """`count` new tokens of sample `key` arrived now (a speculative step brings several at once)."""
        now = time.perf_counter()
        if self.first_token is None:
            self.first_token = now
        before = self.last_token.get(key)
        if before is not None and count:
            self.gaps.extend([(now - before) / count] * count)
        elif count > 1:
            self.gaps.extend([0.0] * (count - 1))
        self.last_token[key] = now

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started

    def line(self, status: int) -> str:
        ttft = f"{self.ttft:.3f}s" if self.ttft is not None else "-"
        reasons = ",".join(sorted(set(self.finish_reasons))) or "-"
        return (f"{self.ident} status={status} outcome={self.outcome} prompt_tokens={self.prompt_tokens} "
                f"completion_tokens={self.completion_tokens} ttft={ttft} "
                f"total={time.perf_counter() - self.started:.3f}s finish={reasons}")


class Histogram:
    """Cumulative buckets, a sum and a count (Prometheus' histogram)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def lines(self, name: str) -> list[str]:
        out, total = [], 0
        for bound, count in zip((*map(repr, self.bounds), "+Inf"), self.counts):
            total += count
            out.append(f'{name}_bucket{{le="{bound}"}} {total}')
        return out + [f"{name}_sum {self.sum!r}", f"{name}_count {total}"]


class Metrics:
    """The server's counters and histograms; `text(gauges)` is the /metrics page."""

    def __init__(self) -> None:
        self.requests: dict[str, int] = {}  # outcome -> requests
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.started = time.time()

    def record(self, record: RequestRecord, status: int) -> None:
        """Count a request that ended and write its access-log line."""
        self.requests[record.outcome] = self.requests.get(record.outcome, 0) + 1
        self.prompt_tokens += record.prompt_tokens
        self.generation_tokens += record.completion_tokens
        if record.ttft is not None:
            self.ttft.observe(record.ttft)
        for gap in record.gaps:
            self.itl.observe(gap)
        self.e2e.observe(time.perf_counter() - record.started)
        log.info("%s", record.line(status))

    def text(self, gauges: EngineGauges, channel: ChannelStats | None = None) -> str:
        """The /metrics page; `channel`: the engine process's pipe, where the engine runs in one."""
        p = PREFIX
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, values: list[str]) -> None:
            lines.extend([f"# HELP {p}_{name} {help_text}", f"# TYPE {p}_{name} {kind}", *values])

        metric("requests_running", "gauge", "Requests with a row in the batch.",
               [f"{p}_requests_running {gauges.requests_running}"])
        metric("requests_waiting", "gauge", "Requests with no row started yet.",
               [f"{p}_requests_waiting {gauges.requests_waiting}"])
        metric("rows_running", "gauge", "Batch slots holding a row.", [f"{p}_rows_running {gauges.rows_running}"])
        metric("rows_waiting", "gauge", "Rows of long requests waiting out steps while short requests run.",
               [f"{p}_rows_waiting {gauges.rows_waiting}"])
        metric("batch_slots", "gauge", "Batch slots of the engine.", [f"{p}_batch_slots {gauges.slots}"])
        metric("kv_cache_usage_ratio", "gauge", "Cache positions of running rows over the positions it holds.",
               [f"{p}_kv_cache_usage_ratio {gauges.kv_cache_usage!r}"])
        metric("requests_total", "counter", "Requests ended, by outcome.",
               [f'{p}_requests_total{{outcome="{k}"}} {v}' for k, v in sorted(self.requests.items())]
               or [f'{p}_requests_total{{outcome="ok"}} 0'])
        metric("prompt_tokens_total", "counter", "Prompt tokens of ended requests.",
               [f"{p}_prompt_tokens_total {self.prompt_tokens}"])
        metric("generation_tokens_total", "counter", "Tokens generated for ended requests.",
               [f"{p}_generation_tokens_total {self.generation_tokens}"])
        metric("draft_tokens_total", "counter", "Draft tokens proposed (speculation).",
               [f"{p}_draft_tokens_total {gauges.drafted}"])
        metric("draft_tokens_accepted_total", "counter", "Draft tokens accepted (speculation).",
               [f"{p}_draft_tokens_accepted_total {gauges.accepted}"])
        metric("time_to_first_token_seconds", "histogram", "From a request's arrival to its first token.",
               self.ttft.lines(f"{p}_time_to_first_token_seconds"))
        metric("inter_token_latency_seconds", "histogram", "Between consecutive tokens of a sample.",
               self.itl.lines(f"{p}_inter_token_latency_seconds"))
        metric("request_duration_seconds", "histogram", "From a request's arrival to its end.",
               self.e2e.lines(f"{p}_request_duration_seconds"))
        if channel is not None:
            metric("engine_messages_total", "counter", "Step messages from the engine process.",
                   [f"{p}_engine_messages_total {channel.messages}"])
            metric("engine_send_seconds_total", "counter", "CPU seconds the engine loop spent sending its step messages.",
                   [f"{p}_engine_send_seconds_total {channel.engine_s!r}"])
            metric("engine_transit_seconds_total", "counter", "From the engine's send of a step message to its delivery.",
                   [f"{p}_engine_transit_seconds_total {channel.transit_s!r}"])
        return "\n".join(lines) + "\n"
