"""Decode speed with a json_schema constraint against without (issue 19's >= 0.9x bar).

    .venv/bin/python bench/structured.py [--model models/SmolLM2-135M-Instruct] [--rounds 5]

Each round runs `hubzoo generate` twice in fresh processes, the order alternating between
rounds: once constrained by the schema below (greedy; it stops when the JSON is complete)
and once unconstrained for exactly as many tokens (--ignore-eos). Both print their decode
rate (tokens after the first / decode seconds) on stderr; the figure is the median of the
rounds with the spread, and the ratio constrained / unconstrained of the medians. Writes
bench/results/structured.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / "build" / "hubzoo"
PROMPT = ("<|im_start|>user\nDescribe a fictional person as JSON with name, age, city, "
          "email, hobbies and a short bio.<|im_end|>\n<|im_start|>assistant\n")
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string"},
        "email": {"type": "string", "format": "email"},
        "hobbies": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4},
        "bio": {"type": "string"},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "city", "email", "hobbies", "bio", "active"],
}


def run(model: str, extra: list[str], threads: int) -> tuple[float, int, str]:
    cmd = [str(BIN), "generate", "-m", model, "--prompt", PROMPT, "--threads", str(threads), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    m = re.search(r"decode (\d+) steps at ([\d.]+) tok/s", r.stderr)
    if not m:
        raise RuntimeError(r.stderr)
    return float(m.group(2)), int(m.group(1)) + 1, r.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "models" / "SmolLM2-135M-Instruct"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "structured"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        schema_file = Path(tmp) / "schema.json"
        schema_file.write_text(json.dumps(SCHEMA))
        constrained = ["--json-schema", str(schema_file), "--max-new-tokens", str(args.max_new_tokens)]
        # The constrained answer's length sets the unconstrained run's.
        _, n, text = run(args.model, constrained, args.threads)
        plain = ["--ignore-eos", "--max-new-tokens", str(n)]
        rates: dict[str, list[float]] = {"json_schema": [], "none": []}
        for k in range(args.rounds):
            order = [("json_schema", constrained), ("none", plain)]
            for name, extra in order if k % 2 == 0 else order[::-1]:
                rate, _, _ = run(args.model, extra, args.threads)
                rates[name].append(rate)
    med = {k: statistics.median(v) for k, v in rates.items()}
    result = {
        "model": args.model, "tokens": n, "rounds": args.rounds, "threads": args.threads,
        "machine": platform.processor() or platform.machine(),
        "decode_tok_s": {k: {"median": med[k], "min": min(v), "max": max(v), "all": v} for k, v in rates.items()},
        "ratio": med["json_schema"] / med["none"],
        "sample_output": text.strip()[:2000],
        "schema": SCHEMA,
    }
    Path(args.out + ".json").write_text(json.dumps(result, indent=2) + "\n")
    md = [
        "# Structured generation: decode speed with a json_schema constraint",
        "",
        f"`bench/structured.py`, {args.rounds} alternating rounds, fresh process each, greedy, "
        f"{n} new tokens, model `{Path(args.model).name}`.",
        "",
        "| run | decode tok/s median | min-max |",
        "|---|---|---|",
    ]
    for k, v in rates.items():
        md.append(f"| {k} | {med[k]:.2f} | {min(v):.2f}-{max(v):.2f} |")
    md += ["", f"Ratio (json_schema / none, medians): **{result['ratio']:.3f}**", "",
           "Constrained output:", "", "```", text.strip()[:2000], "```", ""]
    Path(args.out + ".md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
