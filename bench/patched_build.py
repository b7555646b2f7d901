"""hubzoo from HEAD with one of bench/patches/ applied, built in a fixed folder under
~/.cache/hubzoo/<name> (so that ccache hits from run to run). For measurements that need
instrumentation or a switch the shipped binary does not have (bench/stream_hint_ab.py,
bench/pool_trace.py); never part of the product."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_patched(patch: str) -> Path:
    """Builds the hubzoo binary with bench/patches/<patch>.patch applied; returns its path."""
    root = Path.home() / ".cache/hubzoo" / patch
    src, build = root / "src", root / "build"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-m", "-C", str(src)], input=archive, check=True)
    subprocess.run(["git", "apply", str(ROOT / f"bench/patches/{patch}.patch")], cwd=src, check=True)
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DHUBZOO_TESTS=OFF", "-DHUBZOO_PYTHON=OFF",
                    "-DHUBZOO_BENCH=OFF"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "hubzoo"], check=True, capture_output=True)
    return build / "hubzoo"
