"""quench on a real two-node Ray cluster on this machine (ray.cluster_utils.Cluster).

Results over Ray must equal the local ones, also when a node is removed in the middle of a run.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from helpers import save_tiny_model
from sandbox_helpers import kill_node, process_tree, processes_with, worker_node
from quench.distributed import ModelSpec, RayOptions
from quench.errors import QuenchError
from quench.execution import SandboxLimits, SandboxPool
from quench.engine.config import EngineConfig
from quench.runs.backends import BackendOptions, make_backend
from quench.engine.types import GenerationRequest, SamplingParams
from quench.models import load_model

ray = pytest.importorskip("ray")  # loopback only: see conftest.py

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
NODE = {"num_cpus": 1, "object_store_memory": 100 * 1024**2, "node_ip_address": "127.0.0.1"}
LIMITS = SandboxLimits(timeout_s=1.0, memory_mb=256)
PROGRAMS = ["assert 1 + 1 == 2", "assert 1 == 2", "while True: pass", "def (", "import sys; sys.exit(3)",
            "raise MemoryError", "print('ok')", "assert sorted([3, 1]) == [1, 3]"]


@pytest.fixture(scope="module")
def cluster() -> Iterator:
    from ray.cluster_utils import Cluster

    temp = tempfile.mkdtemp(prefix="qray")  # short: Ray's socket paths live under it
    nodes = Cluster(initialize_head=True, head_node_args={**NODE, "temp_dir": temp, "include_dashboard": False})
    nodes.temp_dir = temp
    try:
        nodes.add_node(**NODE)
        ray.init(address=nodes.address, log_to_driver=False, logging_level="warning")
        yield nodes
    finally:
        note_processes(nodes)
        ray.shutdown()
        nodes.shutdown()
        leftover = wait_until_gone(SEEN, patience_s=15.0)
        shutil.rmtree(temp, ignore_errors=True)
        assert not leftover, f"processes left behind: {leftover}"


SEEN: set[int] = set()  # every Ray process (GCS, raylets, workers, their sandboxes) seen during the tests


def note_processes(nodes) -> None:
    """Remember the cluster's processes and all their descendants (workers rename themselves)."""
    SEEN.update(pid for root in processes_with(nodes.temp_dir) for pid in process_tree(root))


def wait_until_gone(pids: set[int], patience_s: float) -> list[int]:
    give_up = time.monotonic() + patience_s
    while (alive := [pid for pid in pids if _alive(pid)]) and time.monotonic() < give_up:
        time.sleep(0.1)
    return alive


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"))


def remove_busy_node(cluster, fleet) -> bool:
    """Remove the worker node if its actor holds unfinished chunks now; whether it did."""
    node = worker_node(cluster)
    if not any(m.load > 0 and m.info.get("node") == node.node_id for m in fleet.ready):
        return False
    note_processes(cluster)
    kill_node(cluster, node)
    return True


def requests_for(model_dir: Path, count: int, n: int) -> list[GenerationRequest]:
    tokenizer = load_model(str(model_dir), "float32", "cpu", "completion").tokenizer
    return [GenerationRequest(f"T/{i}", tuple(tokenizer(f"def f{i}(x):\n    return")["input_ids"]), n) for i in range(count)]


FOUR_ROWS = BackendOptions(name="quench", engine=EngineConfig(batch_size=4))


def local_samples(model_dir: Path, requests, sampling) -> dict:
    backend = make_backend(load_model(str(model_dir), "float32", "cpu", "completion"), FOUR_ROWS)
    return {(r.key, r.sample_index): r.token_ids for r in backend.generate(requests, sampling)}


def ray_backend(model_dir: Path, chunk_size: int = 4):
    from quench.distributed.generation import RayBackend

    spec = ModelSpec(str(model_dir), "float32", "cpu", "completion", FOUR_ROWS)
    backend = RayBackend(spec, RayOptions(num_actors=2, chunk_size=chunk_size, start_timeout_s=180))
    backend.start(wait_for=2)
    return backend


def test_generation_over_two_nodes_equals_the_local_engine(cluster, model_dir: Path, tmp_path: Path) -> None:
    from quench.distributed.generation import RayBackend

    requests = requests_for(model_dir, 6, 2)
    with ray_backend(model_dir) as backend:
        for sampling in (SamplingParams(max_new_tokens=16), SamplingParams(temperature=0.9, max_new_tokens=16, seed=5)):
            remote = [(r.key, r.sample_index, r.token_ids) for r in backend.generate(requests, sampling)]
            assert len(remote) == len({(k, i) for k, i, _ in remote}) == 12
            assert {(k, i): t for k, i, t in remote} == local_samples(model_dir, requests, sampling)
        assert len(backend.stats.chunks_by_node) == 2  # both nodes did work
        assert backend.stats.chunks_requeued == 0
    # An error in the actors' own start-up is not retried on other nodes: it ends the run with its reason.
    backend = RayBackend(ModelSpec(str(tmp_path / "missing")), RayOptions(num_actors=2, start_timeout_s=120))
    started = time.monotonic()
    try:
        with pytest.raises(QuenchError, match="missing"):
            backend.start(wait_for=1)
        assert backend.stats.actors_started == 2 and time.monotonic() - started < 90
    finally:
        backend.close()


def test_pool_over_two_nodes_gives_the_local_verdicts(cluster) -> None:
    from quench.distributed.execution import RayPool

    with SandboxPool(2, LIMITS) as local:
        expected = [(r.outcome, r.passed) for r in local.run_many(PROGRAMS)]
    with RayPool(2, LIMITS, options=RayOptions(chunk_size=2)) as pool:
        pool.fleet.wait_ready(2)
        assert pool.isolation == local.isolation
        got = [(r.outcome, r.passed) for r in pool.run_many(PROGRAMS)]
        assert len(pool.stats.chunks_by_node) == 2
    assert got == expected


def test_generation_survives_a_lost_node(cluster, model_dir: Path) -> None:
    requests = requests_for(model_dir, 16, 2)
    sampling = SamplingParams(temperature=0.9, max_new_tokens=128, seed=11)
    expected = local_samples(model_dir, requests, sampling)
    backend = ray_backend(model_dir, chunk_size=2)
    try:
        got: dict = {}
        removed = False
        for result in backend.generate(requests, sampling):
            assert (result.key, result.sample_index) not in got
            got[(result.key, result.sample_index)] = result.token_ids
            removed = removed or remove_busy_node(cluster, backend.fleet)
        assert removed, "the worker node never had work in flight when a result came back"
        assert got == expected
        assert backend.stats.actors_lost >= 1 and backend.stats.chunks_requeued >= 1
    finally:
        backend.close()
        cluster.add_node(**NODE)  # for the next test


def test_pool_survives_a_lost_node(cluster) -> None:
    from quench.distributed.execution import RayPool

    programs = [f"import time; time.sleep(0.2); assert {i} % 3 != 1" for i in range(16)]
    expected = [i % 3 != 1 for i in range(16)]
    with RayPool(2, LIMITS, options=RayOptions(chunk_size=2, start_timeout_s=120)) as pool:
        pool.fleet.wait_ready(2)
        got: dict = {}
        removed = False
        started = time.monotonic()
        for key, result in pool.imap(enumerate(programs)):
            assert key not in got
            got[key] = result.passed
            removed = removed or remove_busy_node(cluster, pool.fleet)
        assert removed, "the worker node never had work in flight when a result came back"
        assert [got[i] for i in range(16)] == expected
        assert pool.stats.actors_lost >= 1 and pool.stats.chunks_requeued >= 1
        assert time.monotonic() - started < 60
