"""`quench serve`: an OpenAI-compatible HTTP server on quench's engine (docs/serving.md)."""

from __future__ import annotations

import argparse
import sys

from quench.cli import common
from quench.errors import QuenchError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve a model over the OpenAI HTTP API (docs/serving.md)")
    common.add_model_args(parser)
    server = parser.add_argument_group("server")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s: this machine only)")
    server.add_argument("--port", type=int, default=8000)
    server.add_argument("--served-model-name", default=None, metavar="NAME",
                        help="the model name clients send and /v1/models lists (default: --model)")
    server.add_argument("--max-model-len", type=int, default=None, metavar="TOKENS",
                        help="prompt + answer tokens per sample (default: 2048, or the model's limit if lower)")
    server.add_argument("--max-waiting", type=int, default=256, metavar="N",
                        help="requests queued before the engine starts them; more are answered 429 (default %(default)s)")
    server.add_argument("--max-n", type=int, default=64, help="samples per request, at most (default %(default)s)")
    server.add_argument("--shutdown-timeout", type=float, default=30.0, metavar="S",
                        help="on SIGTERM, seconds in-flight requests get to finish before they are cancelled")
    parser.set_defaults(handler=run)


def check_args(args: argparse.Namespace) -> None:
    """Everything that needs no model, before it loads."""
    if args.backend != "quench":
        raise QuenchError(f"--backend {args.backend}: quench serve runs quench's own engine (--backend quench)")
    if args.max_model_len is not None and args.max_model_len < 2:
        raise QuenchError(f"--max-model-len must be at least 2, got {args.max_model_len}")
    for flag, value in (("--max-waiting", args.max_waiting), ("--max-n", args.max_n)):
        if value < 1:
            raise QuenchError(f"{flag} must be at least 1, got {value}")
    if args.shutdown_timeout < 0:
        raise QuenchError(f"--shutdown-timeout must be >= 0, got {args.shutdown_timeout}")


def run(args: argparse.Namespace) -> int:
    from quench.models import load_model
    from quench.serve.server import build_service, check_address, context_length, make_server
    from quench.serve.service import ServeConfig

    check_args(args)
    options = common.backend_options_from_args(args)
    check_address(args.host, args.port)
    loaded = load_model(args.model, args.dtype, args.device, args.prompt_format,
                        notify=lambda message: print(message, file=sys.stderr))
    config = ServeConfig(args.served_model_name or args.model, context_length(loaded, args.max_model_len),
                         args.max_n, args.max_waiting, args.shutdown_timeout)
    service = build_service(loaded, options, config)
    server = make_server(service, args.host, args.port)
    print(f"serving {config.model_name} on http://{args.host}:{args.port}/v1 "
          f"(context {config.max_model_len} tokens, batch {options.engine.batch_size}, "
          f"speculate {options.engine.drafter}); Ctrl-C or SIGTERM stops", file=sys.stderr, flush=True)
    server.run()
    return 0
