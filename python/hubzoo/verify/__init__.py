"""hubzoo.verify: the verification ladder (docs/design.md) run against transformers on this machine.

    python -m hubzoo.verify MODEL [--dtype float32|bfloat16|all] [--mode eager|fused|all]
        [--json FILE] [--markdown FILE] [--plot FILE.png] [--threads N] [--long-tokens 512]
        [--new-tokens 32] [--quiet]

MODEL is a snapshot directory or a repo id in the HF cache. Progress goes to stderr;
the matrix to stdout. Exit status: 0 every check of every column passed, 1 a check
failed, 2 the run could not start or finish (bad MODEL, bad option, a snapshot that
transformers or hubzoo cannot load in a requested dtype/mode).

In Python:

    from hubzoo import verify
    report = verify.run("models/SmolLM2-135M-Instruct", dtypes=["float32"])
    print(verify.render_text(report))
    open("r.md", "w").write(verify.render_markdown(report))
    verify.plot_layers(report, "r.png")

The reference is transformers with attn_implementation="eager": HF fp32 (the
truth every number is measured against) and HF bf16 (the same checkpoint loaded with
from_pretrained(dtype=torch.bfloat16): what a bf16 engine can be expected to reach).

Columns: dtype x mode x input. Inputs: "short" (the chat-template prompt when the
snapshot has a chat template, else a fixed sentence) and "long" (>= long_tokens
tokens of prose, past any enabled sliding window); without tokenizer.json both are
deterministic random ids.

Report (the dict run() returns; --json writes it), format "hubzoo.verify/2"
(version 1 also had columns[].status / reason and summary.complete / not_available):

    format, model, name, snapshot, architecture, num_layers, vocab_size, elapsed_s, notes: [str]
    metadata: hubzoo_version, git_commit, source_tree {path, head, dirty}, compiler,
              compiler_detail, matmul_target, cpu, cpu_flags, cpu_count, threads {hubzoo, torch},
              reference {library, attn_implementation, fp32, bf16}, versions {torch,
              transformers, tokenizers, sentence-transformers, numpy, python}, platform, date, argv
    settings: dtypes, modes, long_tokens, new_tokens, decode_steps_long, margin_sigmas,
              top_k, thresholds {fp32_logits_atol, cached_atol_fp32, bf16_ratio_max {eager, fused}}
    inputs: {short|long: {kind, tokens, description, ids}}
    references: {short|long: {tokens, sigma, margin_sigma (sigma over the tokens whose routing
              is confident in every sparse layer; = sigma for a dense model),
              margin_threshold (8 margin_sigma), margin_positions,
              decided_positions (margin > 8 sigma and routing confident in every sparse layer),
              routing: {sparse_layers, sigma_r [per sparse layer], threshold, pairs,
                        confident_pairs, after_near_tie, excluded_tokens,
                        excluded_margin_positions, hf_bf16_kept}  (sparse_layers [] when dense),
              hf_fp32_greedy: [ids],
              hf_bf16: {logits_rms, logits_max_abs, kl_mean, kl_max, top1_agreement,
                        top5_containment, margin_full, greedy (short input only,
                        and only when a bf16 column ran; else null)},
              layers: {names, hf_fp32_rms, hf_bf16_err_rms}}}
    columns: [{name "dtype/mode/input", dtype, mode, input, tokens,
              metrics: {logits_rms, logits_max_abs, bf16_ratio, kl_mean, kl_max,
                        top1_agreement, top5_containment (over top5_positions),
                        top5_positions, top5_excluded, top5_excluded_missing,
                        greedy {tokens, reference, prefix, length, identical},
                        cached {prefill, positions, argmax_agreement, max_abs_diff},
                        margin {threshold, positions, full, cached_positions, cached},
                        routing {pairs, kept, lost: [[token, layer]], cached_pairs,
                                 cached_kept, cached_lost}},
              layers: {names, rms},
              checks: [{key, label, pass (true|false|null = not applicable), value, threshold}],
              passed}]
    summary: {passed, failed: ["column: check"]}
    matrix: {columns: [name], rows: [{key, label, cells: [str]}]}

Numbers (fractions are over positions of the input; KL in nats, per token):
    logits RMS / max abs err    ours - HF fp32 over every logit
    error ratio                 RMS(ours - HF fp32) / RMS(HF bf16 - HF fp32) (sigma)
    mean/max KL                 KL(softmax HF fp32 || softmax ours); [ref] rows: HF bf16's own;
                                KL ratio: our mean KL / HF bf16's mean KL
    top-1, top-5                our argmax = HF fp32's; HF fp32's argmax among our 5 largest
                                (bf16 columns of a sparse MoE model: at tokens whose routing is
                                confident in every sparse layer; the others counted in
                                top5_excluded, top5_excluded_missing of them outside our top-5)
    greedy                      our greedy (our dtype) vs HF fp32 model.generate(do_sample=False):
                                identical leading tokens / longer length
    cached decode               forward_incremental (prefill, then one token per step) vs our
                                own full forward, over the decoded positions
    routing (sparse MoE)        per sparse layer, sigma_r = RMS(HF bf16 - HF fp32 router logits)
                                over tokens confident in every earlier sparse layer; a (token,
                                layer) pair is confident when it is confident upstream and HF
                                fp32's gap between its k-th and (k+1)-th router logits > 8
                                sigma_r: our selected expert set = HF fp32's there (full forward,
                                cached decode); tokens not confident in every sparse layer are
                                excluded from the 8-sigma decisions and from bf16's top-5, and
                                counted (verify/routing.py)
    8-sigma decisions           positions where HF fp32's top-1/top-2 margin > 8 margin_sigma
                                (and the routing is confident): share where our argmax equals
                                HF fp32's (full forward, cached decode); margin_sigma is sigma
                                without the tokens excluded for near-tie routing (their logits
                                move by far more than rounding noise when bf16 flips a route)
    per-layer                   RMS(ours - HF fp32) at embed, layers.{i} (decoder layer output),
                                norm, logits (forward hooks on the HF side)

Checks (the ladder's pass bars): fp32: logits max abs <= 1e-3, argmax equal, greedy
identical, cached decode within 1e-4; bf16: error ratio <= 1.15 eager / 1.0 fused; every
dtype: cached decode argmax equal, top-5 containment 100% (bf16 sparse MoE: where routing is
confident), routing kept at every confident
(token, sparse layer) pair (full and cached; n/a for a dense model), 8-sigma decisions 100%
(full and cached; n/a when no position clears the margin), mean KL <= HF bf16's mean KL (in bf16
eager, <= 1.15^2 x HF bf16's: KL grows with the square of the logit error, and eager
reproduces transformers' own bf16 roundings, so it sits at HF's KL give or take
accumulation-order noise).

Encoder-decoders (T5, FLAN-T5, mT5; config is_encoder_decoder): the input feeds the encoder
and every column runs over the decoder's positions, teacher-forced with the decoder start
token and the input's first 63 tokens (verify/seq2seq.py); per-layer rows are encoder.embed,
encoder.layers.{i}, encoder.norm, decoder.embed, decoder.layers.{i}, decoder.norm; greedy
generates from the encoder input; cached decode steps the decoder (cross-attention K/V once).

The bf16 reference is transformers loaded with from_pretrained(dtype=torch.bfloat16), as
users load it (model.to(torch.bfloat16) would also round the RoPE inv_freq buffer).
"""

from __future__ import annotations

from .harness import (  # noqa: F401
    DTYPES,
    FORMAT,
    INPUTS,
    MODES,
    Progress,
    VerifyError,
    run,
)
from .report import CHECKS, ROWS, matrix, plot_layers, render_markdown, render_matrix_markdown, render_text  # noqa: F401


def main(argv=None) -> int:
    from .cli import main as _main

    return _main(argv)
