"""Toolchains of MBXP's languages: what a machine has, and the shared read-only build cache.

The cache directory (`QUENCH_TOOLCHAINS`, default `~/.cache/quench/toolchains`) is prepared once,
outside the sandbox, from trusted inputs only, and is bound read-only into every sandbox: a
program can read it but never change what the next program sees. It holds a precompiled
`bits/stdc++.h` (every MBCPP program includes it; parsing it is most of g++'s time). Node.js,
the JDK and Go need nothing prepared: the JDK ships its class-data archive and Debian's Go its
precompiled standard library.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from quench.datasets.languages import LANGUAGES

log = logging.getLogger(__name__)

ENV_VAR = "QUENCH_TOOLCHAINS"
PCH_TIMEOUT_S = 300
MIN_PCH_BYTES = 1 << 20  # a real precompiled bits/stdc++.h is tens of MB; anything smaller is rebuilt


def toolchain_dir() -> str:
    """Where the shared build cache lives (absolute; it need not exist)."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        return os.path.abspath(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(cache), "quench", "toolchains")


def sandbox_binds() -> list[str]:
    """Paths outside the system directories that programs' toolchains read: bound read-only if present.

    The cache directory, and the JDK's configuration, which Debian keeps under /etc.
    """
    return [toolchain_dir(), *sorted(glob.glob("/etc/java-*"))]


def has_toolchain(language: str) -> bool:
    """Whether this machine can build and run programs of `language` (Python always)."""
    if language == "python":
        return True
    if shutil.which(LANGUAGES[language].tool) is None:
        return False
    if language == "javascript":  # MBJSP's harness compares with lodash
        return any(os.path.isdir(os.path.join(path, "lodash")) for path in
                   ("/usr/share/nodejs", "/usr/lib/nodejs", "/usr/lib/node_modules", "/usr/local/lib/node_modules"))
    return True


def prepare(language: str) -> None:
    """Prepare the shared cache for `language` (idempotent; nothing to do for most languages)."""
    if language == "cpp" and shutil.which("g++"):
        prepare_cpp_header()


def prepare_cpp_header() -> Path | None:
    """Precompile `bits/stdc++.h` with the flags programs are built with; None if g++ cannot."""
    target = Path(toolchain_dir()) / "cpp" / "bits" / "stdc++.h.gch"
    if target.is_file() and target.stat().st_size >= MIN_PCH_BYTES:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    for directory in (target.parent, target.parent.parent, Path(toolchain_dir())):
        directory.chmod(0o755)  # programs run as nobody
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:  # same file system: os.replace
        header = Path(scratch) / "stdc++.h"
        header.write_text("#include <bits/stdc++.h>\n", encoding="ascii")
        built = Path(scratch) / "stdc++.h.gch"
        command = ["g++", "-x", "c++-header", str(header), "-o", str(built)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=PCH_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            log.warning("could not precompile bits/stdc++.h (%s); C++ programs build without it", err)
            return None
        if done.returncode != 0:
            log.warning("could not precompile bits/stdc++.h: %s", done.stderr.strip()[-300:])
            return None
        built.chmod(0o644)
        os.replace(built, target)  # atomic: a concurrent reader sees the whole file or none
    log.info("precompiled bits/stdc++.h into %s", target)
    return target
