"""`quench serve`: the OpenAI HTTP API over quench's engine (continuous batching across clients)."""

from quench.serve.service import ServeConfig

__all__ = ["ServeConfig"]
