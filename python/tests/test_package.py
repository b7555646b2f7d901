"""The Python package as a user installs it: pip install . into a fresh venv.

The package's CMake tree is build-fresh-venv/ beside build/ (same depth: ccache hashes
paths relative to the build folder), with the fresh venv inside it, so ccache finds the
objects of the main build:
only the bindings, whose nanobind include path is inside the fresh venv, compile on a
first run, and nothing compiles after. pip's build isolation would put nanobind under a
new random /tmp path on every run, which defeats ccache for those files, so the two
build requirements of pyproject.toml are installed first (pinned as there, from pip's
cache) and the package is built with --no-build-isolation.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import tomllib

import _util

ROOT = _util.REPO / "build-fresh-venv"


def _run(cmd, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd} -> {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def _build_requirements() -> list[str]:
    with open(_util.REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["build-system"]["requires"]


def test_pip_install_into_a_fresh_venv(tmp_path):
    start = time.monotonic()
    shutil.rmtree(ROOT, ignore_errors=True)
    venv = ROOT / "venv"
    base_python = getattr(sys, "_base_executable", None) or sys.executable
    _run([base_python, "-m", "venv", venv])
    py = venv / "bin" / "python"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    # scripts/setup.sh's ccache settings, for a run of pytest on its own.
    env.setdefault("CCACHE_DIR", os.path.expanduser("~/.cache/ccache"))
    env.setdefault("CCACHE_BASEDIR", str(_util.REPO))
    env.setdefault("CCACHE_NOHASHDIR", "true")
    # The main build's compiler, by the same name: scikit-build-core would otherwise set
    # CXX from Python's sysconfig (g++ where CMake chose c++), and ccache keys on the name.
    cache = _util.BUILD / "CMakeCache.txt"
    if "CXX" not in env and cache.is_file():
        m = re.search(r"^CMAKE_CXX_COMPILER:[A-Z]+=(.+)$", cache.read_text(errors="replace"), re.M)
        if m:
            env["CXX"] = m.group(1).strip()
    _run([py, "-m", "pip", "install", "-q", *_build_requirements()], env=env)
    config = [f"-Cbuild-dir={ROOT}"]
    if shutil.which("ccache"):
        config.append("-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache")
    _run([py, "-m", "pip", "install", "-q", "--no-build-isolation", *config, _util.REPO], env=env)
    installed = time.monotonic() - start

    # Outside the checkout, so nothing but the installed package can be imported.
    probe = "import hubzoo, sys; print(hubzoo.__file__); print(hubzoo.__version__)"
    out = _run([py, "-c", probe], cwd=tmp_path, env=env).stdout.splitlines()
    assert out[0].startswith(str(venv)), out
    assert re.fullmatch(r"\d+\.\d+\.\d+", out[1]), out

    cli = venv / "bin" / "hubzoo"
    assert cli.is_file(), "pip install . did not install the hubzoo command"
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    help_text = _run(["hubzoo", "--help"], cwd=tmp_path, env=env).stdout
    assert "generate" in help_text and "serve" in help_text, help_text
    print(f"\nfresh venv + pip install .: {installed:.0f} s")
