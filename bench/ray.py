"""Ray Data throughput of hubzoo.ray.Embed and Generate: 1 vs 2 local Ray nodes of 1 CPU each
(the scaling ratio), and the overhead against one process on the same cores.

Workloads (the issue's full scale): --texts texts (default 5,000; random words of the tiny
encoder corpus, 1..24 words) embedded with a model (default models/all-MiniLM-L6-v2 when
prepared, else a tiny random BERT), and --prompts prompts (default 500, 2..19 random token
ids) generated greedily for --max-tokens tokens by a language model (default
models/SmolLM2-135M-Instruct when prepared, so that generation is real work and not
Ray's fixed costs; else a tiny random Llama from hubzoo.testing).

Runs, each timed as one wall-clock job (actor start and model load included, as a user
sees it; the best of --rounds):

- single-1: one process, 1 hubzoo thread;  single-2: one process, 2 threads;
- ray-1: a Ray cluster of one node with 1 CPU, one actor (1 thread);
- ray-2: a Ray cluster of two nodes (127.0.0.1) with 1 CPU each, one actor on each.

scaling = ray-1 seconds / ray-2 seconds; overhead = ray-N seconds / single-N seconds.
Every Ray output is checked bit-identical to the single process before timing counts.
Results: bench/results/ray.json and ray.md.

    .venv/bin/python bench/ray.py [--texts 5000] [--prompts 500] [--rounds 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# This file is named ray.py: keep its folder off the import path so `import ray` finds Ray.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import numpy as np  # noqa: E402

import hubzoo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NODE = "bench_node"


def _load(name: str):
    path = ROOT / "python" / "hubzoo" / "testing" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"hubzoo_testing_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def workloads(args, work: Path):
    tiny_encoders, tiny_models = _load("tiny_encoders"), _load("tiny_models")
    minilm = ROOT / "models" / "all-MiniLM-L6-v2"
    encoder = Path(args.encoder) if args.encoder else (
        minilm if (minilm / "config.json").exists() else tiny_encoders.build("bert_mean_dense", work / "enc"))
    smollm2 = ROOT / "models" / "SmolLM2-135M-Instruct"
    lm = Path(args.lm) if args.lm else (
        smollm2 if (smollm2 / "config.json").exists() else tiny_models.build("llama_tied_llama3", work / "lm"))
    rng = np.random.default_rng(22)
    words = " ".join(tiny_encoders.CORPUS).split()
    texts = [" ".join(rng.choice(words, size=rng.integers(1, 24))) for _ in range(args.texts)]
    prompts = [rng.integers(3, 1000, size=rng.integers(2, 20)).tolist() for _ in range(args.prompts)]
    return encoder, lm, texts, prompts


def single(encoder, lm, texts, prompts, threads, max_tokens):
    t0 = time.perf_counter()
    vectors = hubzoo.Embedder.from_pretrained(str(encoder), num_threads=threads).encode(texts, batch_size=64)
    t1 = time.perf_counter()
    model = hubzoo.CausalLM.from_pretrained(str(lm), num_threads=threads)
    tokens = []
    for i in range(0, len(prompts), 32):  # the batches Ray gets
        tokens += [t for t, _ in model.generate_rows(prompts[i:i + 32], max_tokens=max_tokens)]
    t2 = time.perf_counter()
    return {"embed_s": t1 - t0, "generate_s": t2 - t1}, vectors, tokens


def on_ray(nodes, encoder, lm, texts, prompts, max_tokens):
    import ray
    from ray.cluster_utils import Cluster

    from hubzoo.ray import Embed, Generate

    c = Cluster(initialize_head=True,
                head_node_args={"num_cpus": 1, "resources": {NODE: 1}, "include_dashboard": False})
    for _ in range(nodes - 1):
        c.add_node(num_cpus=1, resources={NODE: 1})
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        common = dict(compute=ray.data.ActorPoolStrategy(size=nodes), num_cpus=1, resources={NODE: 1})
        t0 = time.perf_counter()
        ds = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
        rows = ds.map_batches(Embed, fn_constructor_kwargs={"model": str(encoder), "batch_size": 64},
                              batch_size=256, **common).take_all()
        t1 = time.perf_counter()
        ds = ray.data.from_items([{"id": i, "prompt": p} for i, p in enumerate(prompts)])
        gen = ds.map_batches(Generate, fn_constructor_kwargs={"model": str(lm), "max_tokens": max_tokens},
                             batch_size=32, **common).take_all()
        t2 = time.perf_counter()
    finally:
        ray.shutdown()
        c.shutdown()
    vectors = {r["id"]: r["embedding"] for r in rows}
    tokens = {r["id"]: r["generated_ids"].tolist() for r in gen}
    return {"embed_s": t1 - t0, "generate_s": t2 - t1}, vectors, tokens


def check(ref_vectors, ref_tokens, vectors, tokens):
    assert sorted(vectors) == list(range(len(ref_vectors))), "embedding ids lost or duplicated"
    assert all(np.array_equal(vectors[i], ref_vectors[i]) for i in vectors), "embeddings differ"
    assert sorted(tokens) == list(range(len(ref_tokens))), "generation ids lost or duplicated"
    assert all(tokens[i] == ref_tokens[i] for i in tokens), "tokens differ"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=5000)
    ap.add_argument("--prompts", type=int, default=500)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--encoder", default=None)
    ap.add_argument("--lm", default=None, help="the generating model (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        encoder, lm, texts, prompts = workloads(args, Path(tmp))
        best: dict[str, dict[str, float]] = {}

        def keep(name, times):
            for k, v in times.items():
                best.setdefault(name, {})[k] = min(v, best.get(name, {}).get(k, float("inf")))

        for _ in range(args.rounds):  # alternate, so load drift on a shared machine hits all
            for threads in (1, 2):
                times, ref_vectors, ref_tokens = single(encoder, lm, texts, prompts, threads, args.max_tokens)
                keep(f"single-{threads}", times)
            for nodes in (1, 2):
                times, vectors, tokens = on_ray(nodes, encoder, lm, texts, prompts, args.max_tokens)
                check(ref_vectors, ref_tokens, vectors, tokens)
                keep(f"ray-{nodes}", times)
                print(f"ray-{nodes}: {times}", flush=True)
    report(args, encoder, lm, best)


def report(args, encoder, lm, best) -> None:
    rows, result = [], {"texts": args.texts, "prompts": args.prompts, "max_tokens": args.max_tokens,
                        "encoder": Path(encoder).name, "lm": Path(lm).name, "rounds": args.rounds, "runs": best,
                        "load_average": os.getloadavg(), "cpus": os.cpu_count()}
    for task, n, unit in (("embed_s", args.texts, "texts/s"), ("generate_s", args.prompts, "prompts/s")):
        ratio = {"scaling_1_to_2_nodes": best["ray-1"][task] / best["ray-2"][task],
                 "overhead_1_cpu": best["ray-1"][task] / best["single-1"][task],
                 "overhead_2_cpus": best["ray-2"][task] / best["single-2"][task]}
        result[task.replace("_s", "")] = ratio
        rows.append(f"| {task[:-2]} ({n}) | " + " | ".join(
            f"{n / best[k][task]:.0f} {unit}" for k in ("single-1", "ray-1", "single-2", "ray-2"))
            + f" | **{ratio['scaling_1_to_2_nodes']:.2f}x** | {ratio['overhead_1_cpu']:.2f}x / "
            f"{ratio['overhead_2_cpus']:.2f}x |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ray.json").write_text(json.dumps(result, indent=2) + "\n")
    la = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    md = [
        "# Ray Data: 1 vs 2 local nodes of 1 CPU each, and against one process",
        "",
        f"`bench/ray.py`: {args.texts} texts embedded ({Path(encoder).name}, fp32) and {args.prompts} "
        f"prompts generated greedily ({args.max_tokens} tokens, {Path(lm).name}, fp32). Wall time of each "
        f"job, actor start and model load included; best of {args.rounds} alternating rounds. Every "
        f"Ray output was bit-identical to the single process. {os.cpu_count()} cores; load average "
        f"at the end {la} (a shared machine: read ratios, not absolute rates).",
        "",
        "| job | one process, 1 thread | Ray, 1 node x 1 CPU | one process, 2 threads | "
        "Ray, 2 nodes x 1 CPU | scaling 1 -> 2 nodes | Ray overhead (1 CPU / 2 CPUs) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    (out / "ray.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
