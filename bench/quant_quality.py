"""Quantized numerics beside llama.cpp (issue 16): bytes of the quantizers and error of the models.

    .venv/bin/python bench/quant_quality.py            # ~10 min on 2 busy cores

1. Bytes. llama-quantize makes SmolLM2-135M files from its F32 GGUF (Q8_0, Q4_0, Q4_1, Q5_0,
   Q5_1, Q4_K_M, Q5_K_M, Q6_K); every quantized tensor of each is compared with hubzoo's
   quantize_row (ops/quant.h) of the same F32 tensor in the type llama-quantize chose for it.
2. Error. Over the first 4 x 512 tokens of a fixed text (Debian's
   /usr/share/common-licenses/GPL-3), as llama-perplexity scores them: each 512-token chunk
   runs from an empty cache and positions 256..510 are scored (1020 positions). References:
   llama.cpp's F32 run of the F32 GGUF (`llama-perplexity --kl-divergence-base`, whose file
   also gives the tokens) and hubzoo's fp32 run of the same file. For each quantized file:
   - llama.cpp: `llama-perplexity --kl-divergence` (its mean KLD and "same top p");
   - hubzoo exact and int8 modes: the same statistic computed as llama-perplexity computes it
     against llama.cpp's base (its log-probs stored as uint16, terms with log p < -16
     dropped), and the exact KL (float64, whole vocabulary) against hubzoo's own fp32 logits.
   hubzoo also quantizes the F32 file on load (quantize="q8_0" / "q4_k_m"); its logits must
   be bit-identical to those from llama-quantize's file (the same blocks, the same mix).
Writes bench/results/quant_quality.{json,md}.

3. With --real, instead: the real Q4_K_M GGUFs (Qwen2.5-Coder-0.5B-Instruct, Gemma-3-270M),
   whose unquantized weights do not ship. The reference is the model each file holds:
   llama-quantize --allow-requantize dequantizes it to an F32 GGUF, llama.cpp's F32 run of that
   is the KL base and hubzoo's fp32 run of it the exact-KL reference. Scored on the same
   positions: llama.cpp, hubzoo fused and int8 on the Q4_K_M file and bf16dot on its
   matrices dequantized at load (quantize="dequantize"), and transformers on it
   (gguf_file=, dequantized at load) in each --transformers dtype. Writes
   bench/results/quant_quality_real.{json,md}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quant import (cpu_has_amx, dequantized_f32, mode_options, quantized_from_f32,  # noqa: E402
                   real_ggufs)
from run import ROOT, log, machine_description, run_process  # noqa: E402

TEXT = Path("/usr/share/common-licenses/GPL-3")
FTYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M", "Q6_K"]
QUALITY_FILES = ["Q8_0", "Q4_0", "Q4_K_M"]
REAL_FILES = ["Qwen2.5-Coder-0.5B-Instruct-Q4_K_M", "gemma-3-270m-Q4_K_M"]


# ---- 1. bytes ---------------------------------------------------------------

def compare_bytes(f32: Path, qfile: Path) -> dict:
    """Every quantized tensor of qfile against hubzoo's quantizer on f32's tensor."""
    from gguf import GGUFReader

    from hubzoo import _hubzoo

    src = {t.name: t for t in GGUFReader(f32).tensors}
    out = {"equal": 0, "differ": [], "types": {}, "not_quantizable": {}}
    for t in GGUFReader(qfile).tensors:
        name = t.tensor_type.name
        if name in ("F32", "F16", "BF16"):
            continue
        out["types"][name] = out["types"].get(name, 0) + 1
        if not _hubzoo.quant.can_quantize(name):
            out["not_quantizable"][name] = out["not_quantizable"].get(name, 0) + 1
            continue
        x = np.ascontiguousarray(src[t.name].data, dtype=np.float32).reshape(-1)
        ours = np.asarray(_hubzoo.quant.quantize(name, x), dtype=np.uint8)
        theirs = np.asarray(t.data, dtype=np.uint8).reshape(-1)
        if ours.size == theirs.size and np.array_equal(ours, theirs):
            out["equal"] += 1
        else:
            out["differ"].append(f"{t.name} ({name})")
    return out


# ---- 2. error ---------------------------------------------------------------

class Base:
    """llama-perplexity's --kl-divergence-base file: tokens and uint16 log-probs."""

    def __init__(self, path: Path):
        raw = path.read_bytes()
        assert raw[:8] == b"_logits_", path
        self.n_ctx, self.n_vocab, self.n_chunk = np.frombuffer(raw, np.int32, 3, 8)
        off = 20
        self.tokens = np.frombuffer(raw, np.int32, self.n_ctx * self.n_chunk, off)
        off += self.tokens.nbytes
        self.first = self.n_ctx // 2
        self.n_scored = self.n_ctx - 1 - self.first
        nv = 2 * ((self.n_vocab + 1) // 2) + 4
        u16 = np.frombuffer(raw, np.uint16, self.n_chunk * self.n_scored * nv, off)
        u16 = u16.reshape(self.n_chunk, self.n_scored, nv)
        head = u16[:, :, :4].copy().view(np.float32)  # scale, min_log_prob
        self.log_p = (head[..., :1] * u16[:, :, 4:4 + self.n_vocab].astype(np.float32)
                      + head[..., 1:2])  # [chunk, pos, vocab] float32, as llama computes it

    def chunk_ids(self, c: int, bos: int | None) -> np.ndarray:
        ids = self.tokens[c * self.n_ctx:(c + 1) * self.n_ctx].astype(np.int64).copy()
        if bos is not None:
            ids[0] = bos
        return ids


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def llama_kld(base_log_p: np.ndarray, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """llama-perplexity's per-position KL (terms with base log p > -16) and top-1 equality."""
    lq = log_softmax(logits)
    keep = base_log_p > -16
    p = np.exp(base_log_p.astype(np.float64))
    kld = np.where(keep, p * (base_log_p - lq), 0.0).sum(axis=-1)
    return kld, base_log_p.argmax(axis=-1) == logits.argmax(axis=-1)


class Stats:
    def __init__(self):
        self.kld_llama, self.top_llama, self.kld, self.top = [], [], [], []

    def summary(self) -> dict:
        out = {"positions": int(np.concatenate(self.kld_llama).size)}
        for key, kl, top in (("vs_llama_base", self.kld_llama, self.top_llama),
                             ("vs_hubzoo_fp32", self.kld, self.top)):
            if kl:
                k = np.concatenate(kl)
                out[key] = {"mean_kld": float(k.mean()), "p99_kld": float(np.quantile(k, 0.99)),
                            "max_kld": float(k.max()), "same_top1": float(np.concatenate(top).mean())}
        return out


def hubzoo_logits(model, base: Base, bos):
    for c in range(base.n_chunk):
        logits = model.forward(base.chunk_ids(c, bos)[None])[0]
        yield c, np.asarray(logits[base.first:base.n_ctx - 1], dtype=np.float32)


def fp32_reference(base: Base, f32: Path, threads: int, bos) -> tuple[list, dict]:
    """hubzoo's fp32 log-probs per chunk (the exact-KL reference) and their own stats."""
    import hubzoo

    log("hubzoo fp32 reference")
    ref = hubzoo.CausalLM.from_pretrained(str(f32), num_threads=threads)
    ref_lp, floor = [], Stats()
    for c, lg in hubzoo_logits(ref, base, bos):
        ref_lp.append(log_softmax(lg))
        k, t = llama_kld(base.log_p[c], lg)
        floor.kld_llama.append(k)
        floor.top_llama.append(t)
    return ref_lp, floor.summary()


def hubzoo_quality(base: Base, f32: Path, ref_lp: list, files: dict[str, Path], threads: int,
                   bos) -> dict:
    import hubzoo

    out = {}
    for name, path in files.items():
        for mode in ("fused", "int8"):
            # The file llama-quantize wrote, and the F32 file quantized on load to the same
            # type (or mix): the same blocks must give bit-identical logits.
            label = f"hubzoo {mode} ({name} file)"
            log(label)
            m = hubzoo.CausalLM.from_pretrained(str(path), mode=mode, num_threads=threads)
            onload = hubzoo.CausalLM.from_pretrained(str(f32), mode=mode, num_threads=threads,
                                                     quantize=name.lower())
            same = [True]

            def pairs(m=m, onload=onload, same=same):
                for (c, lg), (_, lg2) in zip(hubzoo_logits(m, base, bos),
                                             hubzoo_logits(onload, base, bos)):
                    same[0] = same[0] and np.array_equal(lg.view(np.uint32), lg2.view(np.uint32))
                    yield c, lg

            out[label] = scored(base, ref_lp, pairs())
            out[label]["quantize_on_load_bit_identical"] = bool(same[0])
            del m, onload
    return out


def scored(base: Base, ref_lp: list, chunks) -> dict:
    """Stats of (chunk, logits) pairs against llama.cpp's base and hubzoo's fp32 log-probs."""
    s = Stats()
    for c, lg in chunks:
        k, t = llama_kld(base.log_p[c], lg)
        s.kld_llama.append(k)
        s.top_llama.append(t)
        lq = log_softmax(lg)
        s.kld.append((np.exp(ref_lp[c]) * (ref_lp[c] - lq)).sum(axis=-1))
        s.top.append(ref_lp[c].argmax(axis=-1) == lq.argmax(axis=-1))
    return s.summary()


def bf16_quality(base: Base, ref_lp: list, snapshot: Path, threads: int, bos) -> dict:
    """The bf16 configurations of the best-vs-best table: hubzoo's bf16 modes on the
    safetensors snapshot, and transformers in bfloat16, scored like the quantized files."""
    import hubzoo
    import torch
    from transformers import AutoModelForCausalLM

    out = {}
    for mode in ("fused", "bf16dot"):
        label = f"hubzoo bfloat16 {mode} (snapshot)"
        log(label)
        m = hubzoo.CausalLM.from_pretrained(str(snapshot), dtype="bfloat16", mode=mode,
                                            num_threads=threads)
        out[label] = scored(base, ref_lp, hubzoo_logits(m, base, bos))
        del m
    label = "transformers bfloat16 (snapshot)"
    log(label)
    torch.set_num_threads(threads)
    hf = AutoModelForCausalLM.from_pretrained(str(snapshot), torch_dtype=torch.bfloat16).eval()
    out[label] = scored(base, ref_lp, hf_logits(hf, base, bos))
    return out


def hf_logits(hf, base: Base, bos):
    import torch

    for c in range(base.n_chunk):
        with torch.no_grad():
            ids = torch.tensor(base.chunk_ids(c, bos)[None].astype(np.int64))
            lg = hf(ids).logits[0].float().numpy()
        yield c, np.asarray(lg[base.first:base.n_ctx - 1], dtype=np.float32)


def llama_quality(ppl: Path, base_file: Path, files: dict[str, Path], threads: int) -> dict:
    out = {}
    for name, path in files.items():
        label = f"llama.cpp ({name} file)"
        log(label)
        text, _ = run_process([str(ppl), "-m", str(path), "--kl-divergence-base", str(base_file),
                               "--kl-divergence", "-c", "512", "-t", str(threads)])
        def grab(pat):
            m = re.search(pat + r"\s*:\s*([-\d.]+)", text)
            return float(m.group(1)) if m else None
        out[label] = {"vs_llama_base": {
            "mean_kld": grab(r"Mean\s+KLD"), "p99_kld": grab(r"99\.0%\s+KLD"),
            "max_kld": grab(r"Maximum KLD"), "same_top1": grab(r"Same top p") / 100}}
    return out


def write_md(report: dict, path: Path) -> None:
    lines = ["# Quantized numerics beside llama.cpp (SmolLM2-135M-Instruct)", "",
             f"`{report['command']}`; llama.cpp {report['llama_cpp_dir']}; text {report['text']} "
             f"(sha256 {report['text_sha256'][:12]}), first {report['positions_note']}.", "",
             "## Quantizer bytes against llama-quantize", "",
             "Each file made by `llama-quantize F32.gguf OUT TYPE` (no imatrix); each quantized "
             "tensor compared with hubzoo's quantize_row of the F32 tensor in the type "
             "llama-quantize chose for it (its mix and fallbacks: SmolLM2's 576-column rows are "
             "not whole 256-blocks, so most K-type tensors fall back to Q5_0/Q5_1/Q8_0).", "",
             "| file type | tensor types in the file | equal bytes | differ | no hubzoo quantizer |",
             "|---|---|---|---|---|"]
    for ft, r in report["bytes"].items():
        types = ", ".join(f"{k} {v}" for k, v in sorted(r["types"].items()))
        lines.append(f"| {ft} | {types} | {r['equal']} | {len(r['differ']) or 0} | "
                     f"{sum(r['not_quantizable'].values())} |")
    lines += ["", "## Error against the fp32 model", "",
              "KL(fp32 || quantized) per scored position, mean / 99th percentile, and top-1 "
              "agreement. 'vs llama.cpp F32' is llama-perplexity's own statistic (base log-probs "
              "stored as uint16, terms below log p = -16 dropped), computed for hubzoo's logits "
              "the same way; 'vs hubzoo fp32' is the exact KL over the whole vocabulary.", "",
              "| engine (file) | mean KLD vs llama.cpp F32 | p99 | same top-1 | "
              "mean KLD vs hubzoo fp32 | same top-1 | quantized on load: same logits |",
              "|---|---|---|---|---|---|---|"]
    lines += quality_rows(report["quality"])
    path.write_text("\n".join(lines) + "\n")


# ---- 3. the real GGUFs -----------------------------------------------------------------------

def bos_of(path: Path) -> int | None:
    """The BOS id llama-perplexity puts first in each chunk, or None (no add_bos_token)."""
    from gguf import GGUFReader

    fields = GGUFReader(path).fields
    add_bos = bool(fields["tokenizer.ggml.add_bos_token"].parts[-1][0]) \
        if "tokenizer.ggml.add_bos_token" in fields else False
    return int(fields["tokenizer.ggml.bos_token_id"].parts[-1][0]) if add_bos else None


def kl_base(ppl: Path, model: Path, base_file: Path, a) -> Base:
    """llama-perplexity's --kl-divergence-base run of `model` over the text."""
    run_process([str(ppl), "-m", str(model), "-f", str(TEXT), "-c", "512", "--chunks",
                 str(a.chunks), "-t", str(a.threads), "--kl-divergence-base", str(base_file)])
    return Base(base_file)


def real_quality(llama_dir: Path, a) -> dict:
    """Per real GGUF: every engine's error against the model the file holds."""
    import hubzoo
    import torch
    from transformers import AutoModelForCausalLM

    ppl = llama_dir / "bin/llama-perplexity"
    files = real_ggufs()
    models = {}
    for stem in (x for x in a.real_files.split(",") if x):
        path = files[stem]
        f32 = dequantized_f32(llama_dir, path)
        tmp = Path(tempfile.mkdtemp())
        log(f"{stem}: llama.cpp F32 base (dequantized file)")
        base = kl_base(ppl, f32, tmp / "base.kld", a)
        bos = bos_of(path)
        q = llama_quality(ppl, tmp / "base.kld", {"Q4_K_M": path}, a.threads)
        (tmp / "base.kld").unlink()
        tmp.rmdir()
        ref_lp, floor = fp32_reference(base, f32, a.threads, bos)
        q["hubzoo fp32 (dequantized F32 file)"] = floor
        for mode in ("fused", "int8", "bf16dot-dequantize"):
            label = f"hubzoo {mode} (Q4_K_M file)"
            log(f"{stem}: {label}")
            m = hubzoo.CausalLM.from_pretrained(str(path), num_threads=a.threads,
                                                **mode_options(mode))
            q[label] = scored(base, ref_lp, hubzoo_logits(m, base, bos))
            del m
        torch.set_num_threads(a.threads)
        for dt in (d for d in a.transformers.split(",") if d):
            label = f"transformers {dt} (Q4_K_M file)"
            log(f"{stem}: {label}")
            hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                      dtype=getattr(torch, dt)).eval()
            q[label] = scored(base, ref_lp, hf_logits(hf, base, bos))
            del hf
        models[stem] = {"file": str(path), "dequantized_f32": str(f32),
                        "positions_note": positions_note(base), "quality": q}
        del base, ref_lp
    return models


def positions_note(base: Base) -> str:
    return (f"{base.n_chunk} x {base.n_ctx} tokens, positions {base.first}..{base.n_ctx - 2} of "
            f"each scored ({base.n_chunk * base.n_scored} positions)")


def quality_rows(quality: dict) -> list[str]:
    out = []
    for label, r in quality.items():
        a, b = r.get("vs_llama_base", {}), r.get("vs_hubzoo_fp32", {})
        f = lambda d, k, fmt: (fmt.format(d[k]) if d.get(k) is not None else "")  # noqa: E731
        onload = {True: "bit-identical", False: "DIFFER"}.get(
            r.get("quantize_on_load_bit_identical"), "")
        out.append(f"| {label} | {f(a, 'mean_kld', '{:.6f}')} | {f(a, 'p99_kld', '{:.5f}')} | "
                   f"{f(a, 'same_top1', '{:.2%}')} | {f(b, 'mean_kld', '{:.6f}')} | "
                   f"{f(b, 'same_top1', '{:.2%}')} | {onload} |")
    return out


def write_real_md(report: dict, path: Path) -> None:
    lines = ["# Error on the real GGUFs, beside llama.cpp and transformers", "",
             f"`{report['command']}`; llama.cpp {report['llama_cpp_dir']}; text {report['text']} "
             f"(sha256 {report['text_sha256'][:12]}). These files ship without their unquantized "
             "weights, so the reference is the model each file holds: `llama-quantize "
             "--allow-requantize FILE OUT F32` dequantizes every tensor, llama.cpp's F32 run of "
             "that file is the base of llama-perplexity's statistic ('vs llama.cpp F32': base "
             "log-probs stored as uint16, terms below log p = -16 dropped, computed for the other "
             "engines' logits the same way) and hubzoo's fp32 run of it the exact KL over the "
             "whole vocabulary ('vs hubzoo fp32'). transformers loads the Q4_K_M file itself "
             "(gguf_file=: dequantized at load, then cast to its dtype).", ""]
    for stem, m in report["models"].items():
        lines += [f"## {stem}", "", f"{m['positions_note']}.", "",
                  "| engine (file) | mean KLD vs llama.cpp F32 | p99 | same top-1 | "
                  "mean KLD vs hubzoo fp32 | same top-1 | |", "|---|---|---|---|---|---|---|"]
        lines += quality_rows(m["quality"]) + [""]
    path.write_text("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--skip-bytes", action="store_true")
    ap.add_argument("--real", action="store_true", help="the real Q4_K_M GGUFs instead (3.)")
    ap.add_argument("--transformers", default="bfloat16,float32",
                    help="with --real: transformers' dtypes, comma-separated")
    ap.add_argument("--real-files", default=",".join(REAL_FILES),
                    help="with --real: the files' stems, comma-separated")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    a.out = a.out or str(ROOT / ("bench/results/quant_quality_real" if a.real
                                 else "bench/results/quant_quality"))

    log("llama.cpp build (cached)")
    out, _ = run_process(["bash", str(ROOT / "bench/build_llama_cpp.sh"),
                          str(ROOT / "models/SmolLM2-135M-Instruct")])
    llama_dir = Path(out.strip().splitlines()[-1])
    sha = llama_dir.name.rsplit("-", 1)[1]
    f32 = llama_dir.parent / "gguf" / f"SmolLM2-135M-Instruct-{sha}-f32.gguf"
    files = quantized_from_f32(llama_dir, f32, FTYPES)
    by_type = {ft: files[f32.name.replace("-f32.gguf", f"-{ft.lower()}")] for ft in FTYPES}
    if cpu_has_amx():
        # The native build's AMX kernels die of SIGILL on a batch of quantized rows (llama.cpp
        # pull 26954, bench/quant.py): llama-perplexity from the build without them.
        out, _ = run_process(["env", "NO_AMX=1", "bash", str(ROOT / "bench/build_llama_cpp.sh")])
        llama_dir = Path(out.strip().splitlines()[-1])
    report = {"command": " ".join([Path(sys.executable).name] + sys.argv),
              "machine": machine_description(), "llama_cpp_dir": str(llama_dir),
              "text": str(TEXT), "text_sha256": hashlib.sha256(TEXT.read_bytes()).hexdigest(),
              "f32": str(f32), "bytes": {}, "quality": {}}
    if a.real:
        del report["f32"], report["bytes"], report["quality"]
        report["models"] = real_quality(llama_dir, a)
        out_path = Path(a.out)
        out_path.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        write_real_md(report, out_path.with_suffix(".md"))
        print(out_path.with_suffix(".md").read_text())
        return
    if not a.skip_bytes:
        for ft, path in by_type.items():
            log(f"bytes: {ft}")
            report["bytes"][ft] = compare_bytes(f32, path)

    base_file = Path(tempfile.mkdtemp()) / "base.kld"  # ~100 MB
    log("llama.cpp F32 base")
    base = kl_base(llama_dir / "bin/llama-perplexity", f32, base_file, a)
    report["positions_note"] = positions_note(base)
    bos = bos_of(f32)
    qfiles = {ft: by_type[ft] for ft in QUALITY_FILES}
    report["quality"].update(llama_quality(llama_dir / "bin/llama-perplexity", base_file, qfiles,
                                           a.threads))
    ref_lp, floor = fp32_reference(base, f32, a.threads, bos)
    report["quality"]["hubzoo fp32 (F32 file)"] = floor
    report["quality"].update(hubzoo_quality(base, f32, ref_lp, qfiles, a.threads, bos))
    bf16 = f32.with_name(f32.name.replace("-f32.gguf", "-bf16.gguf"))
    report["quality"].update(llama_quality(llama_dir / "bin/llama-perplexity", base_file,
                                           {"BF16": bf16}, a.threads))
    report["quality"].update(bf16_quality(base, ref_lp, ROOT / "models/SmolLM2-135M-Instruct",
                                          a.threads, bos))
    base_file.unlink()
    base_file.parent.rmdir()
    out_path = Path(a.out)
    out_path.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    write_md(report, out_path.with_suffix(".md"))
    print(out_path.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
