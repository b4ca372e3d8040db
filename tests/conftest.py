import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # tests/helpers.py: tiny models built in the test

# Test files that start a Ray runtime: one at a time on one machine (`--ray auto` joins a running one).
RAY_FILES = ("tests/distributed/test_ray_cli.py", "tests/distributed/test_ray_cluster.py", "tests/serve/test_replicas.py")


def pytest_xdist_make_scheduler(config, log):
    """`make test` runs on two pytest-xdist workers: each test file on one worker (its module fixtures built
    once), and every file that starts Ray on the same worker."""
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "ray" if path in RAY_FILES else path

    return FileScheduling(config, log)
