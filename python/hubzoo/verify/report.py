"""The report as a matrix (rows: checks, columns: dtype/mode/input), as text, markdown and a plot."""

from __future__ import annotations

from typing import Callable

# Check keys in display order; a column shows "—" for a check that does not apply to its dtype.
CHECKS: list[tuple[str, str]] = [
    ("fp32_logits_atol", "check: fp32 logits max abs <= 1e-3"),
    ("fp32_argmax", "check: fp32 argmax equal everywhere"),
    ("fp32_greedy", "check: fp32 greedy identical to HF fp32"),
    ("cached_atol", "check: cached decode max abs <= 1e-4 (fp32)"),
    ("bf16_ratio", "check: bf16 ratio <= 1.15 eager / 1.0 fused, bf16dot"),
    ("cached_argmax", "check: cached decode argmax = full forward"),
    ("top5", "check: HF fp32 top-1 in our top-5 (100%)"),
    ("routing_full", "check: routing kept where confident, full (100%)"),
    ("routing_cached", "check: routing kept where confident, cached (100%)"),
    ("margin_full", "check: 8-sigma decisions kept, full (100%)"),
    ("margin_cached", "check: 8-sigma decisions kept, cached (100%)"),
    ("kl_mean", "check: mean KL <= HF bf16 mean KL (x1.15^2 eager)"),
]

NA = "n/a"
DASH = "—"


def _g(x, digits: int = 3) -> str:
    if x is None:
        return DASH
    if x == 0:
        return "0"
    return f"{x:.{digits}g}"


def _count(frac, n) -> str:
    """A fraction of n positions as 'k/n'."""
    if frac is None or not n:
        return DASH
    return f"{round(frac * n)}/{n}"


def _pairs(kept, pairs) -> str:
    return f"{kept}/{pairs}" if pairs else DASH


def _excluded(r) -> str:
    """Tokens whose routing nearly ties in some sparse layer: count and share of the input."""
    rt = r.get("routing")
    if not rt or not rt["sparse_layers"]:
        return f"0/{r['tokens']}"
    k, n = rt["excluded_tokens"], r["tokens"]
    return f"{k}/{n} ({100.0 * k / n:.0f}%)"


def _excluded_margin(r) -> str:
    rt = r.get("routing")
    k = rt["excluded_margin_positions"] if rt and rt["sparse_layers"] else 0
    return f"{k}/{r['margin_positions']}"


def _top5_excluded(m, r) -> str:
    """bf16 columns of a sparse MoE model: tokens left out of the top-5 rung, and how many of
    them had HF fp32's top-1 outside our top-5 anyway."""
    k, n = m.get("top5_excluded", 0), r["tokens"]
    if not k:
        return f"0/{n}"
    return f"{k}/{n} ({m.get('top5_excluded_missing', 0)} outside top-5)"


def _routing_ref(r) -> str:
    rt = r.get("routing")
    if not rt or not rt["sparse_layers"]:
        return DASH
    return f"{rt['confident_pairs']}/{rt['pairs']}"


def _greedy(g) -> str:
    if not g:
        return DASH
    text = f"{g['prefix']}/{g['length']}"
    return text + ("" if g["identical"] else " (differs)")


def _metric(fn: Callable[[dict, dict], str]):
    """A row computed from a column's metrics (m) and its input's reference (r)."""

    def cell(col, ref):
        return fn(col["metrics"], ref)

    return cell


def _reference(fn: Callable[[dict], str]):
    """A row computed from the reference alone (shown for every column of that input)."""
    return lambda col, ref: fn(ref)


def _kl_ratio(m, r) -> str:
    hf = r["hf_bf16"]["kl_mean"]
    if not hf:
        return DASH
    return f"{m['kl_mean'] / hf:.4g}"


def _worst_layer(col, ref) -> str:
    if not col["layers"]:
        return NA
    pairs = [(v, n) for v, n in zip(col["layers"]["rms"], col["layers"]["names"]) if v is not None and n != "logits"]
    if not pairs:
        return DASH
    v, n = max(pairs)
    return f"{_g(v)} ({n})"


# (key, label, cell(column, reference) -> str)
ROWS: list[tuple[str, str, Callable]] = [
    ("tokens", "input tokens", lambda col, ref: str(col["tokens"])),
    ("logits_rms", "logits RMS err vs HF fp32", _metric(lambda m, r: _g(m["logits_rms"]))),
    ("logits_max_abs", "logits max abs err vs HF fp32", _metric(lambda m, r: _g(m["logits_max_abs"]))),
    ("bf16_ratio", "error ratio: ours / HF bf16 (RMS vs HF fp32)", _metric(lambda m, r: _g(m["bf16_ratio"]))),
    ("sigma", "[ref] sigma = RMS(HF bf16 - HF fp32)", _reference(lambda r: _g(r["sigma"]))),
    ("margin_sigma", "[ref] margin sigma: sigma at confident-routing tokens",
     _reference(lambda r: _g(r.get("margin_sigma", r["sigma"])))),
    ("kl_mean", "mean KL(HF fp32 ‖ ours) per token", _metric(lambda m, r: _g(m["kl_mean"]))),
    ("kl_max", "max KL(HF fp32 ‖ ours)", _metric(lambda m, r: _g(m["kl_max"]))),
    ("kl_ratio", "mean KL ratio: ours / HF bf16", _metric(lambda m, r: _kl_ratio(m, r))),
    ("hf_kl_mean", "[ref] mean KL(HF fp32 ‖ HF bf16)", _reference(lambda r: _g(r["hf_bf16"]["kl_mean"]))),
    ("hf_kl_max", "[ref] max KL(HF fp32 ‖ HF bf16)", _reference(lambda r: _g(r["hf_bf16"]["kl_max"]))),
    ("top1", "top-1 = HF fp32 top-1", _metric(lambda m, r: _count(m["top1_agreement"], r["tokens"]))),
    ("top5", "HF fp32 top-1 in our top-5 (bf16: confident routing)",
     _metric(lambda m, r: _count(m["top5_containment"], m.get("top5_positions", r["tokens"])))),
    ("top5_excluded", "top-5 positions excluded for near-tie routing", _metric(_top5_excluded)),
    ("hf_top1", "[ref] HF bf16 top-1 = HF fp32 top-1",
     _reference(lambda r: _count(r["hf_bf16"]["top1_agreement"], r["tokens"]))),
    ("greedy", "greedy 32 new: prefix equal to HF fp32", _metric(lambda m, r: _greedy(m["greedy"]))),
    ("hf_greedy", "[ref] HF bf16 greedy vs HF fp32 greedy", _reference(lambda r: _greedy(r["hf_bf16"]["greedy"]))),
    ("cached_argmax", "cached decode argmax = full forward",
     _metric(lambda m, r: _count(m["cached"]["argmax_agreement"], m["cached"]["positions"]))),
    ("cached_max_abs", "cached decode max abs diff vs full", _metric(lambda m, r: _g(m["cached"]["max_abs_diff"]))),
    ("routing_pairs", "[ref] confident routing (token, sparse layer) pairs",
     _reference(_routing_ref)),
    ("routing_full", "routing kept where confident, full forward",
     _metric(lambda m, r: _pairs(m["routing"]["kept"], m["routing"]["pairs"]))),
    ("routing_cached", "routing kept where confident, cached decode",
     _metric(lambda m, r: _pairs(m["routing"]["cached_kept"], m["routing"]["cached_pairs"]))),
    ("hf_routing_full", "[ref] routing kept by HF bf16 where confident",
     _reference(lambda r: _pairs(r["routing"]["hf_bf16_kept"], r["routing"]["confident_pairs"])
                if r.get("routing") and r["routing"]["sparse_layers"] else DASH)),
    ("routing_excluded", "[ref] tokens excluded for near-tie routing", _reference(_excluded)),
    ("margin_positions", "positions with HF fp32 margin > 8 margin sigma",
     _reference(lambda r: f"{r['margin_positions']}/{r['tokens']}")),
    ("margin_excluded", "[ref] of those, excluded for near-tie routing", _reference(_excluded_margin)),
    ("margin_full", "8-sigma decisions kept, full forward",
     _metric(lambda m, r: _count(m["margin"]["full"], m["margin"]["positions"]))),
    ("margin_cached", "8-sigma decisions kept, cached decode",
     _metric(lambda m, r: _count(m["margin"]["cached"], m["margin"]["cached_positions"]))),
    ("hf_margin_full", "[ref] 8-sigma decisions kept by HF bf16",
     _reference(lambda r: _count(r["hf_bf16"]["margin_full"], r.get("decided_positions", r["margin_positions"])))),
    ("worst_layer", "largest per-layer RMS err (where)", _worst_layer),
]


def _check_cell(col, key) -> str:
    for c in col["checks"]:
        if c["key"] == key:
            return "n/a" if c["pass"] is None else ("PASS" if c["pass"] else "FAIL")
    return DASH


def _verdict(col) -> str:
    return "PASS" if col["passed"] else "FAIL"


def matrix(report: dict) -> dict:
    """{"columns": [names], "rows": [{"key", "label", "cells": [str per column]}]}."""
    cols = report["columns"]
    refs = report["references"]
    rows = []
    for key, label, cell in ROWS:
        rows.append({"key": key, "label": label, "cells": [cell(c, refs[c["input"]]) for c in cols]})
    for key, label in CHECKS:
        rows.append({"key": f"check.{key}", "label": label, "cells": [_check_cell(c, key) for c in cols]})
    rows.append({"key": "verdict", "label": "VERDICT", "cells": [_verdict(c) for c in cols]})
    return {"columns": [c["name"] for c in cols], "rows": rows}


def _hubzoo_line(meta: dict) -> str:
    text = f"{meta['hubzoo_version']} (commit {meta['git_commit']}"
    tree = meta.get("source_tree") or {}
    if tree.get("dirty"):
        text += ", built from a source tree with uncommitted changes"
    if tree.get("head") and not str(tree["head"]).startswith(str(meta["git_commit"])[:7]):
        text += f"; source tree now at {tree['head']}"
    return text + ")"


def _meta_lines(report: dict) -> list[tuple[str, str]]:
    meta = report["metadata"]
    v = meta["versions"]
    return [
        ("model", f"{report['name']} ({report['architecture']}, {report['num_layers']} layers, "
                  f"vocab {report['vocab_size']})"),
        ("hubzoo", _hubzoo_line(meta)),
        ("compiler", meta["compiler"]),
        ("matmul ISA", meta["matmul_target"]),
        ("CPU", f"{meta['cpu']} ({meta['cpu_count']} cores visible; flags: {' '.join(meta['cpu_flags']) or '-'})"),
        ("threads", f"hubzoo {meta['threads']['hubzoo']}, torch {meta['threads']['torch']}"),
        ("dtypes x modes", f"{', '.join(report['settings']['dtypes'])} x {', '.join(report['settings']['modes'])}"),
        ("reference", f"transformers {v['transformers']}, torch {v['torch']}, tokenizers {v['tokenizers']}, "
                      f"attn_implementation={meta['reference']['attn_implementation']}; "
                      f"HF fp32 is the reference, HF bf16 = from_pretrained(dtype=torch.bfloat16)"),
        ("sentence-transformers", str(v.get("sentence-transformers"))),
        ("date", meta["date"]),
        ("elapsed", f"{report['elapsed_s']:.0f} s"),
    ]


def _inputs_lines(report: dict) -> list[tuple[str, str]]:
    return [(f"input {name}", f"{i['tokens']} tokens: {i['description']}") for name, i in report["inputs"].items()]


def _summary_line(report: dict) -> str:
    return "PASS" if report["summary"]["passed"] else "FAIL"


def render_text(report: dict) -> str:
    mx = report["matrix"]
    labels = [r["label"] for r in mx["rows"]]
    first = max(len(x) for x in labels + ["check"])
    widths = [max(len(name), *(len(r["cells"][j]) for r in mx["rows"])) for j, name in enumerate(mx["columns"])]
    lines = []
    for k, v in _meta_lines(report) + _inputs_lines(report):
        lines.append(f"{k + ':':<16} {v}")
    lines.append("")
    lines.append("  ".join([f"{'check':<{first}}", *(f"{c:>{w}}" for c, w in zip(mx["columns"], widths))]))
    lines.append("  ".join(["-" * first, *("-" * w for w in widths)]))
    for r in mx["rows"]:
        if r["key"] == "check.fp32_logits_atol" or r["key"] == "verdict":
            lines.append("")
        lines.append("  ".join([f"{r['label']:<{first}}", *(f"{c:>{w}}" for c, w in zip(r["cells"], widths))]))
    lines.append("")
    for f in report["summary"]["failed"]:
        lines.append(f"FAILED {f}")
    for n in report["notes"]:
        lines.append(f"note: {n}")
    lines.append(f"result: {_summary_line(report)}")
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|")


def render_matrix_markdown(report: dict) -> str:
    mx = report["matrix"]
    out = ["| check | " + " | ".join(f"`{c}`" for c in mx["columns"]) + " |",
           "|---|" + "---:|" * len(mx["columns"])]
    for r in mx["rows"]:
        label = f"**{r['label']}**" if r["key"] == "verdict" else _md_escape(r["label"])
        cells = [f"**{c}**" if c in ("FAIL", "PASS") and r["key"] == "verdict" else _md_escape(c)
                 for c in r["cells"]]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def render_markdown(report: dict, title: str | None = None, plot: str | None = None, heading: str = "#") -> str:
    """The report as markdown: metadata, inputs, the matrix, failed checks and notes, plot link."""
    out = [f"{heading} {title or 'hubzoo verify: ' + report['name']}", ""]
    out.append(f"Result: **{_summary_line(report)}**")
    out.append("")
    out.append("| | |")
    out.append("|---|---|")
    for k, v in _meta_lines(report) + _inputs_lines(report):
        out.append(f"| {k} | {_md_escape(v)} |")
    out.append("")
    out.append(render_matrix_markdown(report))
    extra = []
    for f in report["summary"]["failed"]:
        extra.append(f"- FAILED `{f.split(': ', 1)[0]}`: {f.split(': ', 1)[1]}")
    for n in report["notes"]:
        extra.append(f"- note: {n}")
    if extra:
        out += extra + [""]
    if plot:
        out.append(f"![per-layer RMS error vs HF fp32: {report['name']}]({plot})")
        out.append("")
    return "\n".join(out)


def plot_layers(report: dict, path: str) -> str:
    """Per-layer RMS error vs HF fp32, one line per dtype/mode, one panel per input; log y."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np

    floor = 1e-9
    inputs = list(report["inputs"])
    fig, axes = plt.subplots(1, len(inputs), figsize=(6.5 * len(inputs), 4.2), squeeze=False)
    for ax, name in zip(axes[0], inputs):
        ref = report["references"][name]
        names = ref["layers"]["names"]
        x = np.arange(len(names))

        def y(values):
            return np.array([np.nan if v is None else max(v, floor) for v in values], dtype=float)

        for c in report["columns"]:
            if c["input"] != name:
                continue
            ax.plot(x, y(c["layers"]["rms"]), marker="o", markersize=3, linewidth=1.3,
                    label=f"hubzoo {c['dtype']}/{c['mode']}")
        ax.plot(x, y(ref["layers"]["hf_bf16_err_rms"]), linestyle="--", color="black", linewidth=1.2,
                label="HF bf16 (reference)")
        ax.set_yscale("log")
        step = max(1, len(names) // 12)
        ticks = sorted(set(list(range(0, len(names), step)) + [len(names) - 2, len(names) - 1]))
        ax.set_xticks(ticks)
        ax.set_xticklabels([names[i].replace("layers.", "") for i in ticks], rotation=45, fontsize=8)
        ax.set_xlabel("intermediate (embed, decoder layer i, norm, logits)")
        ax.set_ylabel(f"RMS(x - HF fp32)  (0 drawn at {floor:g})")
        ax.set_title(f"{name} input ({ref['tokens']} tokens)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"per-layer error vs transformers fp32: {report['name']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
