"""What every report records (docs/design.md, "Every report records")."""

from __future__ import annotations

import datetime
import glob
import importlib
import os
import platform
import re
import subprocess
import sys
from importlib import metadata as importlib_metadata
from pathlib import Path


def _version(dist: str) -> str | None:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> list[str]:
    """The SIMD flags of /proc/cpuinfo that matter to the kernels."""
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
              "amx_bf16", "amx_tile", "avx_vnni")
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [w for w in wanted if w in have]
    except OSError:
        pass
    return []


def _build_dir(hubzoo_module) -> Path | None:
    """build/ of the compiled package: the tree recorded in hubzoo._build_info by a
    pip install ., or the one holding build/python/hubzoo/__init__.py."""
    here = Path(hubzoo_module.__file__).resolve().parent
    candidates = [here.parents[1], here.parents[2] / "build"]
    try:
        info = importlib.import_module(hubzoo_module.__name__ + "._build_info")
        candidates.insert(0, Path(info.BUILD_DIR))
    except ImportError:
        pass
    for candidate in candidates:
        if (candidate / "CMakeCache.txt").is_file():
            return candidate
    return None


def compiler(hubzoo_module) -> dict[str, str | None]:
    """Compiler of the build, from build/CMakeCache.txt and CMake's compiler record."""
    build = _build_dir(hubzoo_module)
    info: dict[str, str | None] = {"id": None, "version": None, "path": None, "build_type": None,
                                   "source": None}
    if build is None:
        return info
    cache = (build / "CMakeCache.txt").read_text(errors="replace")
    for key, field in (("CMAKE_CXX_COMPILER", "path"), ("CMAKE_BUILD_TYPE", "build_type")):
        m = re.search(rf"^{key}:[A-Z]+=(.*)$", cache, re.M)
        if m:
            info[field] = m.group(1).strip() or None
    for path in sorted(glob.glob(str(build / "CMakeFiles" / "*" / "CMakeCXXCompiler.cmake"))):
        text = Path(path).read_text(errors="replace")
        for key, field in (("CMAKE_CXX_COMPILER_ID", "id"), ("CMAKE_CXX_COMPILER_VERSION", "version")):
            m = re.search(rf'^set\({key} "([^"]*)"\)', text, re.M)
            if m:
                info[field] = m.group(1)
    info["source"] = str(build / "CMakeCache.txt")
    return info


def source_tree(hubzoo_module) -> dict:
    """The source checkout the build came from (CMAKE_HOME_DIRECTORY) and whether it has
    uncommitted changes to tracked files now: the compiled-in commit alone would hide them.
    Generated reports (docs/verification*, bench/results) are outputs, not sources: a
    report being rewritten does not make the tree it describes dirty."""
    build = _build_dir(hubzoo_module)
    out: dict = {"path": None, "head": None, "dirty": None}
    if build is None:
        return out
    m = re.search(r"^CMAKE_HOME_DIRECTORY:[A-Z]+=(.*)$", (build / "CMakeCache.txt").read_text(errors="replace"),
                  re.M)
    if not m or not os.path.isdir(os.path.join(m.group(1).strip(), ".git")):
        return out
    src = m.group(1).strip()
    out["path"] = src
    try:
        head = subprocess.run(["git", "-C", src, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        status = subprocess.run(["git", "-C", src, "status", "--porcelain", "--untracked-files=no", "--", ".",
                                 ":(exclude)docs/verification.md", ":(exclude)docs/verification",
                                 ":(exclude)bench/results"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return out
    if head.returncode == 0:
        out["head"] = head.stdout.strip()
    if status.returncode == 0:
        out["dirty"] = bool(status.stdout.strip())
    return out


def compiler_string(info: dict) -> str:
    parts = [p for p in (info.get("id"), info.get("version")) if p]
    text = " ".join(parts) if parts else (info.get("path") or "unknown")
    if info.get("build_type"):
        text += f" ({info['build_type']})"
    return text


def collect(threads_hubzoo: int, threads_torch: int) -> dict:
    import hubzoo

    comp = compiler(hubzoo)
    return {
        "hubzoo_version": hubzoo.__version__,
        "git_commit": hubzoo.git_commit,
        "source_tree": source_tree(hubzoo),
        "compiler": compiler_string(comp),
        "compiler_detail": comp,
        "matmul_target": hubzoo.matmul_target(),
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "threads": {"hubzoo": threads_hubzoo, "torch": threads_torch},
        "reference": {
            "library": "transformers",
            "attn_implementation": "eager",
            "fp32": "from_pretrained(dtype=torch.float32)",
            "bf16": "from_pretrained(dtype=torch.bfloat16)",
        },
        "versions": {
            "torch": _version("torch"),
            "transformers": _version("transformers"),
            "tokenizers": _version("tokenizers"),
            "sentence-transformers": _version("sentence-transformers"),
            "numpy": _version("numpy"),
            "python": platform.python_version(),
        },
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "argv": list(sys.argv),
    }
