"""`python -m hubzoo.verify`: argument parsing, output files, exit status."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import harness, report as report_mod


def _choices(value: str, known: tuple[str, ...]) -> list[str]:
    return list(known) if value == "all" else [value]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hubzoo.verify",
        description="Run the verification ladder for MODEL against transformers on this machine "
        "and print the matrix (rows: checks, columns: dtype x mode x input).",
    )
    p.add_argument("model", metavar="MODEL", help="snapshot directory or repo id in the HF cache")
    p.add_argument("--dtype", choices=[*harness.DTYPES, "all"], default="all")
    p.add_argument("--mode", choices=[*harness.MODES, "all"], default="all")
    p.add_argument("--json", metavar="FILE", help="write the full report as JSON")
    p.add_argument("--markdown", metavar="FILE", help="write the report as markdown")
    p.add_argument("--plot", metavar="FILE.png", help="write the per-layer error plot (matplotlib)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads for hubzoo and torch (default: hubzoo all cores, torch its default)")
    p.add_argument("--long-tokens", type=int, default=512, metavar="N",
                   help="tokens of the long input (default 512)")
    p.add_argument("--new-tokens", type=int, default=harness.NEW_TOKENS, metavar="N",
                   help=f"greedy tokens generated (default {harness.NEW_TOKENS})")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


def _write(path: str, text: str) -> None:
    """Write via a temporary file so nothing half-written is left behind."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads is not None and args.threads < 1:
        print(f"error: --threads must be >= 1, got {args.threads}", file=sys.stderr)
        return 2
    try:
        rep = harness.run(args.model, _choices(args.dtype, harness.DTYPES), _choices(args.mode, harness.MODES),
                          threads=args.threads, long_tokens=args.long_tokens, new_tokens=args.new_tokens,
                          progress=not args.quiet)
    except harness.VerifyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    sys.stdout.write(report_mod.render_text(rep))
    try:
        plot = None
        if args.plot:
            tmp = f"{args.plot}.tmp{os.getpid()}.png"
            report_mod.plot_layers(rep, tmp)
            os.replace(tmp, args.plot)
            plot = os.path.relpath(args.plot, os.path.dirname(os.path.abspath(args.markdown))) if args.markdown \
                else args.plot
        if args.json:
            _write(args.json, json.dumps(rep, indent=1) + "\n")
        if args.markdown:
            _write(args.markdown, report_mod.render_markdown(rep, plot=plot))
    except OSError as e:
        print(f"error: cannot write output: {e}", file=sys.stderr)
        return 2
    return 0 if rep["summary"]["passed"] else 1
