"""Where the int8 mode's error comes from: activation blocks simulated in transformers.

    .venv/bin/python bench/int8_act_blocks.py                 # ~15 min on 2 cores

transformers loads each real Q4_K_M GGUF (models/gguf/) dequantized to fp32. A forward
pre-hook on every linear layer then rounds its input as the int8 mode does (per block of B
columns: dx = amax / 127, q = round(x / dx) clamped to +-127, x ~ q * dx), with B = 32 for
the matrices stored in 32-weight block types and B = the size under test for those stored
in the K types (256-weight blocks). Everything else stays fp32, so the mean KL against the
unhooked fp32 model is the activation rounding's own share of the int8 error. B = 256 is
llama.cpp's pairing (Q8_K against the K types); 32 is hubzoo's int8 mode since 2026-12-06.
Scored as bench/quant_quality.py scores: the first 4 x 512 tokens of Debian's GPL-3, each
chunk from an empty cache, positions 256..510 (1020 positions).

Writes bench/results/int8_act_blocks.{json,md}.

    .venv/bin/python bench/int8_act_blocks.py --snapshot models/SmolLM2-135M-Instruct \
        --uniform-blocks 32,16 --out bench/results/int8_act_blocks_smollm2

does the same on a safetensors snapshot with every linear layer's input rounded per the
same block B (the 32-weight block types' case, llama.cpp's Q8_0 activations: B = 32), and
also per B = 32 with one projection kind left unrounded at a time (its share).
"""

import argparse
import json
import pathlib
import sys
import time

import gguf
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODELS = ROOT / "models" / "gguf"
TEXT = pathlib.Path("/usr/share/common-licenses/GPL-3")
FILES = ["Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf", "gemma-3-270m-Q4_K_M.gguf"]
# transformers' projection names -> the GGUF tensor names of llama.cpp.
GGUF_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
K_TYPES = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}


def round_int8(x: torch.Tensor, block: int) -> torch.Tensor:
    """x rounded to int8 per block of columns and scaled back (0 for an all-zero block)."""
    shape = x.shape
    xb = x.reshape(-1, shape[-1] // block, block)
    d = xb.abs().amax(-1, keepdim=True) / 127
    safe = torch.where(d > 0, d, torch.ones_like(d))
    q = torch.where(d > 0, torch.clamp(torch.round(xb / safe), -127, 127), torch.zeros_like(xb))
    return (q * d).reshape(shape)


def tensor_type(types: dict, module_name: str) -> str:
    if module_name == "lm_head":
        return types.get("output.weight", types["token_embd.weight"])
    parts = module_name.split(".")
    layer = parts[parts.index("layers") + 1]
    return types[f"blk.{layer}.{GGUF_NAMES['.'.join(parts[-2:])]}.weight"]


def measure(name: str, k_blocks: list[int]) -> list[dict]:
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(MODELS / name).tensors}
    tok = transformers.AutoTokenizer.from_pretrained(MODELS, gguf_file=name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        MODELS, gguf_file=name, dtype=torch.float32).eval()
    ids = tok(TEXT.read_text(), return_tensors="pt").input_ids[0]
    chunks = [ids[i * 512:(i + 1) * 512] for i in range(4)]
    state = {"k_block": None}  # None: no rounding (the fp32 reference)

    def hook(is_k: bool):
        def pre(_module, args):
            if state["k_block"] is None:
                return None
            return (round_int8(args[0], state["k_block"] if is_k else 32),)
        return pre

    counts = {"K": 0, "32": 0}
    for module_name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            is_k = tensor_type(types, module_name) in K_TYPES
            counts["K" if is_k else "32"] += 1
            module.register_forward_pre_hook(hook(is_k))

    def run():
        with torch.no_grad():
            return [torch.log_softmax(model(c[None]).logits[0, 256:511].double(), -1) for c in chunks]

    base = run()
    rows = []
    for k_block in k_blocks:
        state["k_block"] = k_block
        got = run()
        kl = torch.cat([(b.exp() * (b - g)).sum(-1) for b, g in zip(base, got)])
        top = torch.cat([(b.argmax(-1) == g.argmax(-1)).double() for b, g in zip(base, got)])
        rows.append({"file": name, "k_block": k_block, "k_matrices": counts["K"],
                     "other_matrices": counts["32"], "mean_kld": kl.mean().item(),
                     "same_top1": top.mean().item(), "positions": kl.numel()})
        print(f"[{time.strftime('%H:%M:%S')}] {name} K-type block {k_block}: "
              f"mean KLD {rows[-1]['mean_kld']:.6f}", file=sys.stderr, flush=True)
    return rows


def measure_uniform(snapshot: pathlib.Path, blocks: list[int]) -> list[dict]:
    """Every linear layer's input rounded per `blocks[i]` columns; then B = 32 without one
    projection kind at a time."""
    tok = transformers.AutoTokenizer.from_pretrained(snapshot)
    model = transformers.AutoModelForCausalLM.from_pretrained(snapshot, dtype=torch.float32).eval()
    ids = tok(TEXT.read_text(), return_tensors="pt").input_ids[0]
    chunks = [ids[i * 512:(i + 1) * 512] for i in range(4)]
    state = {"block": None, "skip": None}

    def hook(name: str):
        def pre(_module, args):
            if state["block"] is None or (state["skip"] and name.endswith(state["skip"])):
                return None
            return (round_int8(args[0], state["block"]),)
        return pre

    kinds = set()
    for module_name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_pre_hook(hook(module_name))
            kinds.add(module_name.split(".")[-1])

    def run():
        with torch.no_grad():
            return [torch.log_softmax(model(c[None]).logits[0, 256:511].double(), -1) for c in chunks]

    base = run()
    rows = []
    for block, skip in [(b, None) for b in blocks] + [(32, k) for k in sorted(kinds)]:
        state["block"], state["skip"] = block, skip
        got = run()
        kl = torch.cat([(b.exp() * (b - g)).sum(-1) for b, g in zip(base, got)])
        rows.append({"file": snapshot.name, "block": block, "unrounded": skip or "",
                     "mean_kld": kl.mean().item(), "positions": kl.numel()})
        print(f"[{time.strftime('%H:%M:%S')}] block {block} unrounded {skip}: "
              f"mean KLD {rows[-1]['mean_kld']:.6f}", file=sys.stderr, flush=True)
    return rows


def write_uniform(rows: list[dict], out: pathlib.Path) -> None:
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        f"# int8 activation blocks on {rows[0]['file']}, simulated in transformers", "",
        "`python bench/int8_act_blocks.py --snapshot ... --uniform-blocks ...`: mean KL of the "
        "fp32 model with every linear layer's input rounded to int8 per block of B columns "
        "(one projection kind left unrounded in the last rows), against the same model "
        f"unrounded; {rows[0]['positions']} positions of GPL-3 as bench/quant_quality.py "
        "scores them.", "",
        "| activation block | left unrounded | mean KLD |", "|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['block']} | {r['unrounded'] or '-'} | {r['mean_kld']:.6f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default=",".join(FILES))
    ap.add_argument("--k-blocks", default="256,32,16")
    ap.add_argument("--snapshot", default="", help="a safetensors snapshot (--uniform-blocks)")
    ap.add_argument("--uniform-blocks", default="32,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "int8_act_blocks"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.snapshot:
        blocks = [int(b) for b in args.uniform_blocks.split(",")]
        write_uniform(measure_uniform(pathlib.Path(args.snapshot), blocks), pathlib.Path(args.out))
        return
    k_blocks = [int(b) for b in args.k_blocks.split(",")]
    for b in k_blocks:
        if b <= 0 or 256 % b != 0:
            ap.error(f"--k-blocks: {b} does not divide a 256-weight block")
    rows = [r for f in args.files.split(",") for r in measure(f, k_blocks)]
    out = pathlib.Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        "# int8 activation blocks against the K types, simulated in transformers",
        "",
        "`python bench/int8_act_blocks.py`: mean KL of the fp32 model with every linear layer's "
        "input rounded to int8 (32-column blocks before the 32-weight block types' matrices, "
        "the block under test before the K types'), against the same model unrounded; "
        f"{rows[0]['positions']} positions of GPL-3 as bench/quant_quality.py scores them.",
        "",
        "| file | K-type matrices / others | activation block before the K types | mean KLD | same top-1 |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['file']} | {r['k_matrices']} / {r['other_matrices']} | {r['k_block']} | "
                     f"{r['mean_kld']:.6f} | {100 * r['same_top1']:.2f}% |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
