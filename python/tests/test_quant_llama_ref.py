"""hubzoo's quantizers against llama.cpp's own reference quantizers, byte for byte.

gguf-py has no K-type quantizers, so the reference is llama.cpp itself: the
fixture compiles ggml-quants.c (with its few headers) from the llama-cpp-python
sdist that bench/build_llama_cpp.sh pins into a small shared library, with the
flags llama.cpp's ggml-base gets on x86-64 (-O3, no FMA), and calls its
quantize_row_*_ref through ctypes. Those functions are also what llama-quantize
writes for these types when it is given no importance matrix.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("HUBZOO_CACHE", Path.home() / ".cache" / "hubzoo"))
# ggml-quants.c and the headers it includes, under the sdist's ggml/.
SOURCES = ["src/ggml-quants.c", "src/ggml-quants.h", "src/ggml-common.h", "src/ggml-impl.h",
           "src/ggml-cpu/ggml-cpu-impl.h", "include/ggml.h", "include/gguf.h",
           "include/ggml-cpu.h", "include/ggml-backend.h", "include/ggml-alloc.h"]
# ggml-quants.c references these from ggml.c in functions the test never calls.
STUBS = r"""
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>
void ggml_abort(const char *file, int line, const char *fmt, ...) { (void)file; (void)line; (void)fmt; abort(); }
size_t ggml_row_size(int type, int64_t ne) { (void)type; (void)ne; abort(); }
const char *ggml_type_name(int type) { (void)type; abort(); }
size_t ggml_type_size(int type) { (void)type; abort(); }
"""
# Type: (elements, bytes) of a block.
BLOCK = {"Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
         "Q8_0": (32, 34), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210)}


def sdist() -> Path:
    """The pinned sdist, fetched with pip as bench/build_llama_cpp.sh does when missing."""
    version = re.search(r"^VERSION=(\S+)", (ROOT / "bench/build_llama_cpp.sh").read_text(),
                        re.M).group(1)
    path = CACHE / "downloads" / f"llama_cpp_python-{version}.tar.gz"
    if not path.exists():
        tmp = path.parent / f".fetch-{os.getpid()}"
        tmp.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}",
                        "--no-deps", "--no-binary", ":all:", "-q", "-d", str(tmp)], check=True)
        (tmp / path.name).replace(path)
        shutil.rmtree(tmp)
    return path


def build_library(tar_path: Path, out: Path) -> None:
    """Compiles ggml-quants.c from the sdist into the shared library `out`."""
    work = out.parent / f".build-{os.getpid()}"
    prefix = tar_path.name.removesuffix(".tar.gz") + "/vendor/llama.cpp/ggml/"
    with tarfile.open(tar_path) as tar:
        for name in SOURCES:
            dest = work / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(tar.extractfile(tar.getmember(prefix + name)).read())
    (work / "stubs.c").write_text(STUBS)
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    # ggml-base's flags; -ffp-contract=off as it has no FMA on x86-64, on any host.
    subprocess.run([cc, "-O3", "-DNDEBUG", "-std=gnu11", "-ffp-contract=off", "-fPIC", "-shared",
                    f"-I{work / 'include'}", f"-I{work / 'src'}", str(work / "src/ggml-quants.c"),
                    str(work / "stubs.c"), "-lm", "-o", str(work / out.name)], check=True)
    (work / out.name).replace(out)  # atomic: a concurrent run sees all or nothing
    shutil.rmtree(work)


@pytest.fixture(scope="module")
def ggml():
    """quantize_row_*_ref by type name; the library is cached beside the sdist."""
    tar_path = sdist()
    digest = hashlib.sha256(tar_path.read_bytes()).hexdigest()[:12]
    lib = CACHE / "downloads" / f"ggml-quants-ref-{digest}.so"
    if not lib.exists():
        build_library(tar_path, lib)
    so = ctypes.CDLL(str(lib))
    fns = {}
    for name in BLOCK:
        fn = getattr(so, f"quantize_row_{name[:2].lower()}{name[2:]}_ref")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None
        fns[name] = fn
    return fns


def reference(ggml, name, x):
    elems, size = BLOCK[name]
    x = np.ascontiguousarray(x, np.float32)
    out = np.zeros(x.size // elems * size, np.uint8)
    ggml[name](x.ctypes.data, out.ctypes.data, x.size)
    return out


def rows(rng, k):
    """Many rows of k floats: random scales over 2^-40..2^20 and the edge cases."""
    scale = np.exp2(rng.integers(-40, 20, (48, 1))).astype(np.float32)
    r = [rng.standard_normal((48, k)).astype(np.float32) * scale,
         rng.uniform(-3, 7, (4, k)), np.abs(rng.standard_normal((4, k))),  # offsets, one sign
         -np.abs(rng.standard_normal((4, k))),
         np.zeros((2, k)), np.full((2, k), 0.5), np.full((2, k), -3.25),  # zeros, constants
         rng.standard_normal((4, k)) * 2.0**-140,  # subnormal floats
         rng.standard_normal((4, k)) * 3e4]  # past fp16's range
    x = np.concatenate([np.asarray(a, np.float32) for a in r])
    out = x[:8].copy()  # huge outliers in otherwise small rows
    for i in range(8):
        out[i, rng.integers(0, k, 2)] = [1e4, -3e7][i % 2] * (1 + i)
    mixed = x[8:16].copy()  # zero 16- and 32-groups inside a row, -0.0, tiny values
    mixed[:, 16:48] = 0
    mixed[:, 100:116] = -0.0
    mixed[:, 200:232] = 1e-20
    mixed[:, 300:302] = [1e-38, -2e-39]
    return np.concatenate([x, out, mixed])


@pytest.mark.parametrize("name", list(BLOCK))
def test_quantize_bytes_equal_llama_cpp(q, ggml, name):
    rng = np.random.default_rng(17 + list(BLOCK).index(name))
    x = rows(rng, 1024)
    elems, size = BLOCK[name]
    ref = reference(ggml, name, x).reshape(-1, size)
    got = q.quantize(name, x.reshape(-1)).reshape(-1, size)
    bad = np.flatnonzero((got != ref).any(axis=1))
    assert bad.size == 0, (f"{name}: {bad.size} of {len(ref)} blocks differ, first {bad[:5]} "
                           f"(row {bad[0] * elems // 1024})")


@pytest.fixture(scope="module")
def q(hz):
    return hz._hubzoo.quant
