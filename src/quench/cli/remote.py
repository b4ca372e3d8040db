"""Flags of `--backend openai` (generation by an OpenAI-compatible server) and the objects built from them."""

from __future__ import annotations

import argparse

from quench.errors import QuenchError


def add_openai_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--backend openai (an OpenAI-compatible server; docs/serving.md)")
    group.add_argument("--base-url", default=None, metavar="URL",
                       help="the server's API root, e.g. http://127.0.0.1:8000/v1 (--model: the name it serves)")
    group.add_argument("--api-key-env", default=None, metavar="NAME",
                       help="environment variable holding the API key (the key is never written anywhere)")
    group.add_argument("--concurrency", type=int, default=8, metavar="N", help="requests in flight at once (default %(default)s)")
    group.add_argument("--request-timeout", type=float, default=600.0, metavar="S",
                       help="seconds per request before it is retried (default %(default)s)")
    group.add_argument("--max-retries", type=int, default=5, metavar="N",
                       help="retries of a request after 429, 5xx, a timeout or a broken connection (default %(default)s)")


def check_remote_args(args: argparse.Namespace) -> None:
    """The flags that do not fit --backend openai (or need it), before anything runs."""
    if args.backend != "openai":
        if getattr(args, "base_url", None):
            raise QuenchError("--base-url needs --backend openai")
        return
    if not args.base_url:
        raise QuenchError("--backend openai needs --base-url URL (e.g. http://127.0.0.1:8000/v1)")
    if getattr(args, "ray", None):
        raise QuenchError("--ray does not apply to --backend openai (the server does the generation)")
    if args.speculate not in ("none", "auto") or args.guard:
        raise QuenchError("--speculate and --guard apply to quench's engine; the server decides how it decodes")
    if args.request_timeout <= 0:
        raise QuenchError(f"--request-timeout must be positive, got {args.request_timeout:g}")


def openai_options(args: argparse.Namespace):
    from quench.runs.openai_backend import OpenAIOptions

    check_remote_args(args)
    return OpenAIOptions(args.base_url, args.model, args.prompt_format or "chat", args.api_key_env, args.concurrency,
                         args.request_timeout, args.max_retries).check()


def remote_model(args: argparse.Namespace):
    """What is known of the served model without loading anything (its name and prompt format)."""
    from quench.runs.openai_backend import RemoteModel

    options = openai_options(args)
    return RemoteModel(options.model, options.prompt_format, options.base_url)


def openai_backend(args: argparse.Namespace):
    from quench.runs.openai_backend import OpenAIBackend

    return OpenAIBackend(openai_options(args))
