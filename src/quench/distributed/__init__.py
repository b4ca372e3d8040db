"""Scale-out: engine processes on one machine (`local`), and on Ray generation actors and sandbox execution across a cluster.

Importing this package does not import Ray; `make_ray_backend` and `make_ray_pool` do, when a
run asks for Ray (`--ray`). See docs/ray.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quench.distributed.config import ModelSpec, RayOptions
from quench.execution.sandbox import SandboxLimits

if TYPE_CHECKING:
    from quench.distributed.execution import RayPool
    from quench.distributed.generation import RayBackend

__all__ = ["ModelSpec", "RayOptions", "make_ray_backend", "make_ray_pool"]


def make_ray_backend(address: str, spec: ModelSpec, options: RayOptions = RayOptions()) -> "RayBackend":
    """Join the cluster and start generation actors (they load the model while the driver goes on)."""
    from quench.distributed.cluster import connect
    from quench.distributed.generation import RayBackend

    connect(address)
    backend = RayBackend(spec, options)
    backend.start()
    return backend


def make_ray_pool(
    address: str, workers: int | None, limits: SandboxLimits, options: RayOptions = RayOptions(), isolation: str = "auto",
    allow_unconfined: bool = False,
) -> "RayPool":
    """Join the cluster; a `RayPool` to use like `SandboxPool` (as a context manager)."""
    from quench.distributed.cluster import connect
    from quench.distributed.execution import RayPool

    connect(address)
    return RayPool(workers, limits, isolation=isolation, options=options, allow_unconfined=allow_unconfined)
