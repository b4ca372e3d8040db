"""Joining a Ray cluster and sizing a fleet from its resources."""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
import tempfile
from contextlib import contextmanager, nullcontext
from typing import Iterator

import ray

from quench.errors import QuenchError

log = logging.getLogger(__name__)

CONNECT_ATTEMPTS = "5"  # Ray's GCS connection attempts, about a second each (its default, 20, is slow to fail)


def connect(address: str = "auto") -> None:
    """Join the cluster at `address`; "auto": the one this machine is part of, else a new local one.

    An address is what `ray start --head` prints (HOST:6379). Worker output stays in the nodes'
    Ray logs (/tmp/ray/session_latest/logs): the terminal belongs to the CLI.
    """
    if ray.is_initialized():
        return
    if address != "auto":
        check_reachable(address)
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", CONNECT_ATTEMPTS)
    with nullcontext() if address == "auto" else quiet_stderr():  # a local cluster's processes keep fd 2
        try:
            ray.init(address=None if address == "auto" else address, log_to_driver=False,
                     logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise QuenchError(f"--ray {address}: cannot join the Ray cluster: {err}") from None
    log.info("joined Ray cluster: %s", ray.cluster_resources())


@contextmanager
def quiet_stderr() -> Iterator[None]:
    """Ray's C++ client logs a warning per failed attempt straight to file descriptor 2: keep it off the
    terminal (the CLI reports the outcome in one line) and in the log at debug level instead."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            log.debug("Ray while connecting: %s", captured.read().decode(errors="replace"))


# A gRPC server (a Ray head is one) answers an HTTP/2 client preface with a SETTINGS frame (RFC 9113 3.4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + empty SETTINGS
HTTP2_SETTINGS = 0x4


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a HOST:PORT where no gRPC server answers (Ray itself retries for minutes, or forever on
    a port that accepts connections and stays silent)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise QuenchError(f"--ray {address}: expected auto or HOST:PORT (what `ray start --head` prints)")
    hint = "start one with `ray start --head`"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as connection:
            connection.sendall(HTTP2_PREFACE)
            frame = connection.recv(9)
    except socket.timeout:
        raise QuenchError(f"--ray {address}: no Ray head answers there (nothing replied within {timeout_s:g} s); "
                          f"{hint}") from None
    except OSError as err:
        raise QuenchError(f"--ray {address}: no Ray head answers there ({err}); {hint}") from None
    if len(frame) < 4 or frame[3] != HTTP2_SETTINGS:
        raise QuenchError(f"--ray {address}: what answers there is not a Ray head (it does not speak gRPC); {hint}")


def fleet_size(requested: int | None, cpus_per_actor: float, gpus_per_actor: float) -> int:
    """`requested`, else as many actors as the cluster has CPUs (or GPUs) for, at least one."""
    if requested is not None:
        return requested
    resources = alive_resources()
    if gpus_per_actor > 0:
        count = math.floor(resources.get("GPU", 0.0) / gpus_per_actor + 1e-9)
        if count < 1:
            raise QuenchError(f"the Ray cluster has no GPU for actors that need {gpus_per_actor:g} each")
    else:
        count = math.floor(resources.get("CPU", 0.0) / cpus_per_actor + 1e-9)
    return max(1, count)


def alive_resources() -> dict[str, float]:
    """Total resources of the nodes alive now (`ray.cluster_resources` lags behind a lost node)."""
    totals: dict[str, float] = {}
    for node in ray.nodes():
        if node.get("Alive"):
            for name, amount in node.get("Resources", {}).items():
                totals[name] = totals.get(name, 0.0) + amount
    return totals


def node_id() -> str:
    return ray.get_runtime_context().get_node_id()


def cpu_slots(cpus_per_slot: float) -> list[str]:
    """Alive node ids, each repeated once per `cpus_per_slot` CPUs it has: where CPU-bound actors go."""
    slots: list[str] = []
    for node in ray.nodes():
        if node.get("Alive"):
            count = math.floor(node.get("Resources", {}).get("CPU", 0.0) / cpus_per_slot + 1e-9)
            slots += [node["NodeID"]] * count
    return slots

