"""The engine process's pipe: what one step message costs at 1, 8 and 32 rows (quench.engine.serving.channel).

    python benchmarks/serve_channel.py
    python benchmarks/serve_channel.py --rows 1,8,32,128 --messages 5000

A step message carries one `Tokens` event per row (one token each, as a decode step without speculation
gives), the rows' tickets and the engine's gauges. Per row count: the sender's CPU time to pickle and write
one message (what the engine loop pays per step), the receiver's CPU time to read and unpickle it (what the
front end's reader pays), and the wall time from send to receipt, p50 and p99, over --messages messages sent
one every --interval-ms milliseconds (a step's pace). CPU times hold on a loaded machine; the transit does not.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from multiprocessing.connection import Connection

from quench.engine.serving.channel import StepEvents
from quench.engine.serving.events import Tokens
from quench.engine.serving.gauges import EngineGauges


def receive(conn: Connection) -> None:
    """Read messages until None; send back (CPU seconds per read, transit seconds of each)."""
    cpu, transits = 0.0, []
    conn.send("ready")
    while True:
        began = time.thread_time()
        message = conn.recv()
        if message is None:
            break
        cpu += time.thread_time() - began
        transits.append(time.perf_counter() - message.sent)
    conn.send((cpu / max(1, len(transits)), transits))


def step_message(rows: int, step: int) -> StepEvents:
    events = tuple((ticket, Tokens(0, (1000 + step % 4000,))) for ticket in range(rows))
    return StepEvents(events, (), EngineGauges(rows, 0, rows, 0, 32, 0.25, 0, 0), 0.0, time.perf_counter())


def measure(rows: int, messages: int, interval_s: float) -> dict[str, float]:
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe(duplex=True)
    reader = context.Process(target=receive, args=(theirs,), daemon=True)
    reader.start()
    theirs.close()
    assert ours.recv() == "ready"
    cpu = 0.0
    for step in range(messages):
        began = time.thread_time()
        ours.send(step_message(rows, step))
        cpu += time.thread_time() - began
        time.sleep(interval_s)
    ours.send(None)
    read_cpu, transits = ours.recv()
    reader.join()
    transits.sort()
    return {"send_us": cpu / messages * 1e6, "read_us": read_cpu * 1e6, "transit_p50_us": transits[len(transits) // 2] * 1e6,
            "transit_p99_us": transits[int(0.99 * len(transits))] * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1,8,32")
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--interval-ms", type=float, default=2.0)
    args = parser.parse_args()
    print("| rows | send, engine CPU (us) | read, front-end CPU (us) | transit p50 / p99 (us) |")
    print("|---|---|---|---|")
    for rows in (int(r) for r in args.rows.split(",")):
        cell = measure(rows, args.messages, args.interval_ms / 1e3)
        print(f"| {rows} | {cell['send_us']:.1f} | {cell['read_us']:.1f} | "
              f"{cell['transit_p50_us']:.0f} / {cell['transit_p99_us']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
