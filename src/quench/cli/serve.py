"""`quench serve`: an OpenAI-compatible HTTP server on quench's engine (docs/serving.md)."""

from __future__ import annotations

import argparse
import sys

from quench.cli import flags, settings, validate
from quench.errors import QuenchError


# Slots of the server's batch: concurrent clients beyond it wait in the queue. Decoding more rows per step
# costs little more per token on a CPU (the weights are read once per step), and fair admission keeps a
# request's n samples from taking them all (docs/serving.md, Scheduling).
SERVE_BATCH_SIZE = 32
SPECULATE_AUTO = ("none on a GGUF's blocks with 8-bit activations (--weights gguf-int8, whose steps are too short for "
                  "a draft to pay); else hybrid where a draft is shipped for the model, else ngram, in the steps whose "
                  "rows are all greedy and at most --draft-max-rows; sampled requests draw as regular decoding does "
                  "(a speculative acceptance test is not one arithmetic order on every CPU)")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve a model over the OpenAI HTTP API (docs/serving.md)")
    flags.add_model_args(parser, backends=("quench",), engines=False,  # one engine, quench's, per process
                          batch_size=SERVE_BATCH_SIZE, speculate_help=SPECULATE_AUTO)
    server = parser.add_argument_group("server")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s: this machine only)")
    server.add_argument("--port", type=int, default=8000, help="TCP port to listen on")
    server.add_argument("--served-model-name", default=None, metavar="NAME",
                        help="the model name clients send and /v1/models lists (default: --model)")
    server.add_argument("--max-model-len", type=int, default=None, metavar="TOKENS",
                        help="prompt + answer tokens per sample (default: 2048, or the model's limit if lower)")
    server.add_argument("--max-waiting", type=int, default=256, metavar="N",
                        help="requests queued before the engine starts them; more are answered 429 (default %(default)s)")
    server.add_argument("--max-body-bytes", type=int, default=None, metavar="BYTES",
                        help="larger request bodies are answered 413 before they are read (default: 4 MiB)")
    server.add_argument("--prefill-budget", type=int, default=None, metavar="TOKENS",
                        help="prompt tokens prefilled per decode step, at most, so arrivals never stall the running rows for "
                             "long: a longer prompt goes in chunks over several steps where batch invariance "
                             "keeps the bits, else whole (default: 512)")
    server.add_argument("--prefill-share", type=float, default=None, metavar="S",
                        help="while rows decode, prefill arrivals in chunks of about S times a decode step's time (measured "
                             "as it runs), so a stream's inter-token latency stays within (1 + S) steps; arrivals wait "
                             "longer for their first token (default: off, --prefill-budget alone)")
    server.add_argument("--engine-loop", choices=("process", "thread"), default="process",
                        help="where the engine loop runs: a process of its own, which only steps while this one serves "
                             "HTTP (default), or a thread of the server's process (docs/serving.md, Engine process)")
    server.add_argument("--no-access-log", action="store_true",
                        help="no INFO line per request (id, tokens, time to first token, total time, finish reason)")
    server.add_argument("--max-n", type=int, default=64, help="samples per request, at most (default %(default)s)")
    server.add_argument("--shutdown-timeout", type=float, default=30.0, metavar="S",
                        help="on SIGTERM, seconds in-flight requests get to finish before they are cancelled")
    cluster = parser.add_argument_group("Ray cluster (needs the serve-ray extra)")
    cluster.add_argument("--ray", default=None, metavar="auto|ADDRESS",
                         help="run --replicas engine replicas on this Ray cluster behind one endpoint (Ray Serve)")
    cluster.add_argument("--replicas", type=int, default=1, metavar="N", help="engine replicas with --ray (default %(default)s)")
    cluster.add_argument("--cpus-per-replica", type=float, default=1.0, metavar="C",
                         help="CPUs (torch threads) per replica (default %(default)s)")
    cluster.add_argument("--gpus-per-replica", type=float, default=None, metavar="G",
                         help="GPUs per replica (default: 1 with --device cuda, else 0)")
    parser.set_defaults(handler=run)


def check_args(args: argparse.Namespace) -> None:
    """Everything that needs no model, before it loads."""
    if args.backend != "quench":
        raise QuenchError(f"--backend {args.backend}: quench serve runs quench's own engine (--backend quench)")
    if args.max_model_len is not None and args.max_model_len < 2:
        raise QuenchError(f"--max-model-len must be at least 2, got {args.max_model_len}")
    for flag, value in (("--max-waiting", args.max_waiting), ("--max-n", args.max_n),
                        ("--max-body-bytes", args.max_body_bytes), ("--prefill-budget", args.prefill_budget)):
        if value is not None and value < 1:
            raise QuenchError(f"{flag} must be at least 1, got {value}")
    if args.prefill_share is not None and not args.prefill_share > 0:
        raise QuenchError(f"--prefill-share must be > 0, got {args.prefill_share}")
    if args.ray is None:
        validate.check_device(args.device)
    if args.shutdown_timeout < 0:
        raise QuenchError(f"--shutdown-timeout must be >= 0, got {args.shutdown_timeout}")
    if str(args.engines) != "1":
        raise QuenchError("--engines: quench serve runs one engine per process; for more, --replicas with --ray")
    if args.ray is None and (args.replicas != 1 or args.gpus_per_replica is not None or args.cpus_per_replica != 1.0):
        raise QuenchError("--replicas, --cpus-per-replica and --gpus-per-replica need --ray ADDRESS")
    if args.replicas < 1:
        raise QuenchError(f"--replicas must be at least 1, got {args.replicas}")
    if args.cpus_per_replica <= 0 or (args.gpus_per_replica is not None and args.gpus_per_replica < 0):
        raise QuenchError("--cpus-per-replica must be > 0 and --gpus-per-replica >= 0")


def run(args: argparse.Namespace) -> int:
    import logging

    check_args(args)  # before the imports below: they load torch
    from quench.serve.server import check_address, make_server

    options = serving_options(args)
    check_address(args.host, args.port)
    if not args.no_access_log:
        logging.getLogger("quench.serve").setLevel(logging.INFO)  # the access log, disconnects
    if args.ray is not None:
        return run_on_ray(args, options)
    service = start_service(args, options)
    config = service.config
    server = make_server(service, args.host, args.port)
    print(f"serving {config.model_name} on http://{args.host}:{args.port}/v1 "
          f"(context {config.max_model_len} tokens, batch {options.engine.batch_size}, "
          f"speculate {describe_speculation(options.engine)}, engine loop in a {args.engine_loop}); Ctrl-C or SIGTERM stops", file=sys.stderr, flush=True)
    server.run()
    return 0


def serving_options(args: argparse.Namespace):  # -> quench.runs.backends.BackendOptions
    """The engine's options, with --speculate auto resolved (`work_settings.greedy_drafter`): drafts for greedy steps."""
    from dataclasses import replace

    from quench.cli import work_settings
    from quench.models.draft import shipped_draft_path
    from quench.models.loading import resolve_weights

    auto = args.speculate == work_settings.AUTO
    if auto:
        weights = resolve_weights(args.weights, args.model, args.dtype, args.device)
        # a server's requests come greedy and sampled: greedy steps draft what a greedy run would, sampled ones none
        args.speculate = work_settings.greedy_drafter(shipped_draft_path(args.model).is_file(), weights)
    options = settings.backend_options_from_args(args)
    return replace(options, engine=replace(options.engine, draft_sampled=False)) if auto else options


def describe_speculation(engine) -> str:
    if engine.drafter == "none" or engine.draft_sampled:
        return engine.drafter
    return f"{engine.drafter} (auto: greedy steps)"


def start_service(args: argparse.Namespace, options):  # -> quench.serve.service.Service
    """Load the model, then start the engine (`--engine-loop`): a process of its own loads its own copy, and this
    process keeps only the tokenizer."""
    import torch

    from quench.models import load_model
    from quench.serve.served_model import ServedModel
    from quench.serve.server import build_process_service, build_service, context_length
    from quench.serve.service import MAX_BODY_BYTES, PREFILL_BUDGET, ServeConfig

    loaded = load_model(args.model, args.dtype, args.device, args.prompt_format, weights=args.weights,
                        notify=lambda message: print(message, file=sys.stderr))
    config = ServeConfig(args.served_model_name or args.model, context_length(loaded, args.max_model_len),
                         args.max_n, args.max_waiting, args.shutdown_timeout,
                         args.max_body_bytes or MAX_BODY_BYTES, args.prefill_budget or PREFILL_BUDGET, args.prefill_share)
    if args.engine_loop == "thread":
        return build_service(loaded, options, config)
    tokenizer = loaded.tokenizer
    del loaded  # the engine process loads the model itself
    print("starting the engine process …", file=sys.stderr, flush=True)
    model = ServedModel(args.model, args.dtype, args.device, args.prompt_format, args.weights, options)
    service = build_process_service(model, tokenizer, config, torch.get_num_threads())
    torch.set_num_threads(1)  # the front end does no tensor arithmetic: the engine process has the threads
    return service


def run_on_ray(args: argparse.Namespace, options) -> int:
    """--ray: replicas on the cluster, Ray Serve's proxy on --host/--port, until SIGTERM or SIGINT."""
    import signal
    import threading

    try:
        from quench.serve import replicas
    except ImportError as err:
        raise QuenchError(f"--ray: {err}") from None
    from quench.distributed import ModelSpec
    from quench.distributed.cluster import connect
    from quench.serve.service import MAX_BODY_BYTES, PREFILL_BUDGET, ServeConfig

    gpus = args.gpus_per_replica if args.gpus_per_replica is not None else float(args.device.startswith("cuda"))
    spec = ModelSpec(args.model, args.dtype, args.device, args.prompt_format, options)
    config = ServeConfig(args.served_model_name or args.model, 0, args.max_n, args.max_waiting, args.shutdown_timeout,
                         args.max_body_bytes or MAX_BODY_BYTES, args.prefill_budget or PREFILL_BUDGET, args.prefill_share)
    fleet = replicas.ReplicaOptions(args.replicas, args.cpus_per_replica, gpus, 2 * options.engine.batch_size)
    connect(args.ray)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    print(f"starting {args.replicas} replica(s) of {config.model_name} on the Ray cluster", file=sys.stderr, flush=True)
    try:
        replicas.start(spec, config, args.max_model_len, fleet, args.host, args.port)
    except RuntimeError as err:  # a replica could not start (e.g. the model is missing on a node)
        replicas.stop()
        raise QuenchError(f"--ray: the replicas did not start: {err}") from None
    print(f"serving {config.model_name} on http://{args.host}:{args.port}/v1 ({args.replicas} replica(s), "
          f"batch {options.engine.batch_size} each); Ctrl-C or SIGTERM stops", file=sys.stderr, flush=True)
    replicas.run_until_signalled(stopping)
    return 0
