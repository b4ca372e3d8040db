import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # tests/helpers.py: tiny models built in the test

# Test files that start a Ray runtime: one at a time on one machine (`--ray auto` joins a running one).
RAY_FILES = ("tests/distributed/test_ray_cli.py", "tests/distributed/test_ray_cluster.py", "tests/serve/test_replicas.py")


# The files that take longest, longest first: the workers take them before the rest, so that neither is left running
# one of them alone at the end (a file missing here only runs later than it might).
LONGEST_FIRST = (
    *RAY_FILES, "tests/engine/kernels/test_native_cross.py", "tests/engine/test_golden.py",
    "tests/execution/test_toolchain_equivalence.py", "tests/cli/test_work_settings.py", "tests/execution/test_languages.py",
    "tests/engine/kernels/test_fixed_levels.py", "tests/distributed/test_local.py", "tests/engine/kernels/test_quant.py",
    "tests/perturbations/test_properties.py", "tests/test_native_target.py", "tests/execution/test_differential.py",
    "tests/robustness/test_pipeline.py", "tests/serve/test_engine_process.py", "tests/cli/test_bad_input.py",
    "tests/cli/test_run_resume.py", "tests/runs/test_mbppplus_run.py", "tests/execution/test_redteam_verdicts.py",
    "tests/engine/test_invariance.py", "tests/engine/kernels/test_qdot.py", "tests/execution/test_sandbox_users.py",
    "tests/execution/test_node_host.py",
)


def pytest_collection_modifyitems(config, items):
    """LONGEST_FIRST's files first, in its order; every other file after them, in collection order."""
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_xdist_make_scheduler(config, log):
    """`make test` runs on two pytest-xdist workers: each test file on one worker (its module fixtures built
    once), and every file that starts Ray on the same worker; files in the collection's order (LONGEST_FIRST)."""
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "ray" if path in RAY_FILES else path

    config.option.loadscopereorder = False  # not by the number of tests in a file: by LONGEST_FIRST
    return FileScheduling(config, log)
