"""Without --ray, nothing of Ray is imported."""

import subprocess
import sys

MODULES = [
    "quench.cli.main", "quench.cli.builders", "quench.runs.samples", "quench.runs.evaluate",
    "quench.robustness.pipeline", "quench.distributed",
]


def test_the_cli_and_pipelines_do_not_import_ray() -> None:
    code = f"import sys\nfor m in {MODULES!r}: __import__(m)\nprint(sorted(n for n in sys.modules if n == 'ray' or n.startswith('ray.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
