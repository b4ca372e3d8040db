"""Serving: requests that arrive while the engine decodes join the running batch at its next step.

`LiveEngine` owns the model in one thread (`quench.engine.serving.engine_thread`); `EngineProcess` runs the
same loop in a process of its own and is used the same way (`quench.engine.serving.engine_process`).
Callers `submit` a request with its own sampling settings and a sink; the engine calls the sink with each
sample's new tokens after every step (`Tokens`), with each finished sample (`Finished`) and, if the
engine fails, once with `Failed`. `cancel` frees the request's rows at the next step.

Every request shares one batch, whatever its settings:
- admission is fair between requests (`quench.engine.serving.live_queue`), and each step prefills at most
  `prefill_budget` prompt tokens, so a burst of arrivals or one long prompt costs the running rows one
  bounded stall per step instead of every prefill at once: a prompt longer than what is left of the
  budget is prefilled in chunks over the next steps (`quench.engine.serving.chunked_prefill`) where the runner
  promises the chunks the bits of a whole prefill, else whole (at least one prompt per step); its
  samples hold their slots meanwhile and draw their first tokens once it is in;
- short requests first: while a request with few tokens left (SHORT_REQUEST) runs beside long ones,
  the long ones' rows wait out the step with their caches kept (at most MAX_WAIT_STEPS in a row), so a
  small request is not slowed to the pace of a batch full of another's samples (`LiveLoop._short_first`);
- every setting is per row: each row carries its request's draw settings (temperature, top-p, top-k), its
  generator (seeded from the request's seed, key and the sample index, `quench.engine.sampling.row_generator`)
  and its limits (`max_new_tokens`, `min_tokens`, `ignore_eos`), and the core decode loop draws and stops each
  row by its own (`quench.engine.decode`): a step whose rows all draw alike may speculate, a step with several
  settings is a regular step in which each row draws from its own logits with its own setting; so a sample's
  tokens do not depend on what else is in the batch (with batch-invariant kernels, bit for bit);
- log-probabilities (`quench.engine.logprobs`): the runner keeps a step's logits only when a row of
  that step asked for them (`RecordingRunner`), so other requests do not pay for them.

`LiveLoop` is the core decode loop with the server's admission (`quench.engine.serving.loop`); it ends a
request with its last sample. What reaches the sinks (tokens, log-probabilities, finished samples) comes from
`LiveSinks`, a listener on it that only reads (`quench.engine.serving.sinks`,
`quench.engine.observers.LoopListener`); the events are `quench.engine.serving.events`. This module gathers
their names.
"""

from __future__ import annotations

from quench.engine.holdback import settled_text, tokens_before
from quench.engine.serving.engine_process import EngineProcess, EngineSpec
from quench.engine.serving.engine_thread import LiveEngine
from quench.engine.serving.events import Failed, Finished, LiveEvent, Sink, Tokens, notify
from quench.engine.serving.gauges import EngineGauges
from quench.engine.serving.live_queue import EngineStopped, QueueFull
from quench.engine.serving.loop import MAX_WAIT_STEPS, PREFILL_BUDGET, SHORT_REQUEST, LiveLoop
from quench.engine.serving.recording_runner import RecordingRunner
from quench.engine.serving.sinks import LiveSinks

__all__ = ["EngineGauges", "EngineProcess", "EngineSpec", "EngineStopped", "Failed", "Finished", "LiveEngine",
           "LiveEvent", "LiveLoop", "LiveSinks", "MAX_WAIT_STEPS", "PREFILL_BUDGET", "QueueFull",
           "RecordingRunner", "SHORT_REQUEST", "Sink", "Tokens", "notify", "settled_text", "tokens_before"]
