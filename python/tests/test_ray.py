"""hubzoo.ray on a local multi-node Ray cluster (two nodes on 127.0.0.1, 2 CPUs each, started
and torn down here).

- Ray Data: HUBZOO_RAY_TEXTS texts (default 5,000) embedded and HUBZOO_RAY_PROMPTS prompts
  (default 500) generated greedily and with per-row seeds and a stop token, by one actor on
  each node (1 CPU, 1 hubzoo thread each): every output bit-identical to this process
  (2 threads, other batches); an actor SIGKILLed mid-job: the job completes, every id once,
  outputs still identical; text prompts through the chat template with a stop string;
  400 rerank pairs; run_batch() from Parquet and JSONL files.
- Ray Serve: two engine replicas (`hubzoo serve` each) behind one endpoint; the `openai`
  client's chat plain and streamed equals this process's greedy tokens; a replica killed
  under load: no request lost that had not started streaming, the replica replaced; a
  replica whose engine process dies fails its health check and is replaced.

Tiny random models (hubzoo.testing); the chat model is a tiny Llama with SmolLM2's
tokenizer and chat template. The default counts are the issue's full scale (about 4 min for
the whole file on the shared 2-core machine, cluster start included); bench/ray.py times
the same jobs.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import psutil
import pytest
import ray
from ray.cluster_utils import Cluster

import _util

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

N_TEXTS = int(os.environ.get("HUBZOO_RAY_TEXTS", "5000"))
N_PROMPTS = int(os.environ.get("HUBZOO_RAY_PROMPTS", "500"))
NODE = "hubzoo_test_node"  # a custom resource, 1 per node: one actor per node
KEY = "ray-test-key"
EOS = 2


tiny_encoders = _util.load_testing("tiny_encoders")


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True,
                head_node_args={"num_cpus": 2, "resources": {NODE: 1}, "include_dashboard": False})
    c.add_node(num_cpus=2, resources={NODE: 1})
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    yield c
    try:
        from ray import serve

        serve.shutdown()
    finally:
        ray.shutdown()
        c.shutdown()


def _descendants(marker: str) -> list:
    """This test's processes (the cluster's nodes are its children) whose command line holds marker."""
    out = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if marker in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


# --- Ray Data --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def encoder_path(tmp_path_factory):
    return tiny_encoders.build("bert_mean_dense", tmp_path_factory.mktemp("ray_enc") / "enc")


@pytest.fixture(scope="module")
def lm_path(tmp_path_factory):
    return _util.tiny_models.build("llama_tied_llama3", tmp_path_factory.mktemp("ray_lm") / "lm")


@pytest.fixture(scope="module")
def texts():
    rng = np.random.default_rng(22)
    words = " ".join(tiny_encoders.CORPUS).split()
    return [" ".join(rng.choice(words, size=rng.integers(1, 24))) for _ in range(N_TEXTS)]


@pytest.fixture(scope="module")
def ref_vectors(hz, encoder_path, texts):
    emb = hz.Embedder.from_pretrained(str(encoder_path), num_threads=2)
    return emb.encode(texts, batch_size=37)


def _embed_ds(encoder_path, texts, batch_size=64):
    from hubzoo.ray import Embed

    ds = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    return ds.map_batches(Embed, fn_constructor_kwargs={"model": str(encoder_path), "batch_size": 16},
                          batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=2),
                          num_cpus=1, resources={NODE: 1})


def _check_embeddings(rows_ids, rows_vecs, texts, ref):
    ids = np.asarray(rows_ids)
    assert sorted(ids.tolist()) == list(range(len(texts))), "an id lost or duplicated"
    vecs = np.stack(rows_vecs)
    assert vecs.dtype == np.float32
    mismatched = [int(i) for i, v in zip(ids, vecs) if not np.array_equal(v, ref[i])]
    assert not mismatched, f"{len(mismatched)} vectors differ from one process, first id {mismatched[0]}"


def test_embed_bit_identical_across_nodes(cluster, encoder_path, texts, ref_vectors):
    rows = _embed_ds(encoder_path, texts).take_all()
    assert set(rows[0]) == {"id", "text", "embedding"}
    _check_embeddings([r["id"] for r in rows], [r["embedding"] for r in rows], texts, ref_vectors)


def test_embed_actor_killed_mid_job(cluster, encoder_path, texts, ref_vectors):
    ids, vecs, killed = [], [], []
    for batch in _embed_ds(encoder_path, texts, batch_size=50).iter_batches(batch_size=None):
        ids += batch["id"].tolist()
        vecs += list(batch["embedding"])
        if not killed:
            workers = _descendants("MapWorker(MapBatches(Embed))")
            assert workers, "no Embed actor process found"
            workers[0].send_signal(signal.SIGKILL)
            killed.append(workers[0].pid)
    assert killed and len(ids) == len(texts)
    _check_embeddings(ids, vecs, texts, ref_vectors)


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(5)
    return [rng.integers(3, 1000, size=rng.integers(2, 20)).tolist() for _ in range(N_PROMPTS)]


def _reference_generate(hz, lm_path, prompts, seeds, max_tokens, **sampling):
    """hubzoo.CausalLM.generate (one seed per call) in this process: rows grouped by seed,
    each row cut after its first EOS."""
    model = hz.CausalLM.from_pretrained(str(lm_path), num_threads=2)
    out = [None] * len(prompts)
    for seed in sorted(set(seeds)):
        rows = [i for i, s in enumerate(seeds) if s == seed]
        width = max(len(prompts[i]) for i in rows)
        ids = np.zeros((len(rows), width), np.int64)
        mask = np.zeros_like(ids)
        for r, i in enumerate(rows):  # left padding
            ids[r, width - len(prompts[i]):] = prompts[i]
            mask[r, width - len(prompts[i]):] = 1
        new = model.generate(ids, mask, max_new_tokens=max_tokens, seed=seed, **sampling)
        for r, i in enumerate(rows):
            out[i] = _cut(new[r].tolist()[:max_tokens], ())
    return out


def _cut(tokens, stop_ids):
    """A row's tokens through its first EOS or stop id (what a stop does to the row)."""
    stops = [k for k, t in enumerate(tokens) if t == EOS or t in stop_ids]
    return tokens[:stops[0] + 1] if stops else tokens


def _generate(lm_path, rows, **options):
    from hubzoo.ray import Generate

    ds = ray.data.from_items(rows)
    ds = ds.map_batches(Generate, fn_constructor_kwargs={"model": str(lm_path), **options},
                        batch_size=32, compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1,
                        resources={NODE: 1})
    got = {r["id"]: r for r in ds.take_all()}
    assert sorted(got) == list(range(len(rows)))
    return got


def test_generate_greedy_bit_identical(hz, cluster, lm_path, prompts):
    ref = _reference_generate(hz, lm_path, prompts, [0] * len(prompts), 12)
    got = _generate(lm_path, [{"id": i, "prompt": p} for i, p in enumerate(prompts)], max_tokens=12)
    for i, want in enumerate(ref):
        assert got[i]["generated_ids"].tolist() == want, i
        assert got[i]["finish_reason"] == ("stop" if want[-1] == EOS else "length"), i


def test_generate_per_row_seeds_and_stop_bit_identical(hz, cluster, lm_path, prompts):
    seeds = [i % 7 + 1 for i in range(len(prompts))]
    sampling = {"temperature": 0.9, "top_k": 40}
    free = _reference_generate(hz, lm_path, prompts, seeds, 10, **sampling)
    # Stop ids: the two tokens sampled most often (so stops happen), never the first ones.
    counts = np.bincount([t for row in free for t in row[1:] if t != EOS], minlength=1)
    stop_ids = tuple(int(t) for t in np.argsort(counts)[-2:])
    ref = [_cut(row, stop_ids) for row in free]
    rows = [{"id": i, "prompt": p, "seed": s} for i, (p, s) in enumerate(zip(prompts, seeds))]
    got = _generate(lm_path, rows, max_tokens=10, stop_token_ids=list(stop_ids), **sampling)
    stopped = 0
    for i, want in enumerate(ref):
        assert got[i]["generated_ids"].tolist() == want, i
        ends = want[-1] in (EOS, *stop_ids)
        stopped += want != free[i]
        assert got[i]["finish_reason"] == ("stop" if ends else "length"), i
    assert stopped > 0, "no row hit a stop id: the stop check tested nothing"
    # The seeds matter: another seed changes some rows.
    other = _reference_generate(hz, lm_path, prompts[:40], [99] * 40, 10, **sampling)
    assert any(o != r for o, r in zip(other, free[:40]))


def test_generate_text_chat_and_stop_strings(hz, cluster, chat_path):
    """String prompts through the chat template, sampled per-row seeds, a stop string: the
    text is cut before it and the tokens after the one completing it dropped."""
    tok = hz.Tokenizer.from_pretrained(str(chat_path))
    model = hz.CausalLM.from_pretrained(str(chat_path), num_threads=2)
    prompts = [f"Question {i}: {w}?" for i, w in enumerate(tiny_encoders.CORPUS * 2)]
    ref = {}
    for i, p in enumerate(prompts):
        ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                      tokenize=True)
        new = model.generate(np.array([ids]), max_new_tokens=16, temperature=1.0, seed=i)[0].tolist()
        ref[i] = _cut(new, ())
    texts = {i: tok.decode(t, skip_special_tokens=True) for i, t in ref.items()}
    # A stop string: a 2-character piece of some row's text, so some rows stop on it.
    stop = next(t[3:5] for t in texts.values() if len(t.strip()) > 8 and t[3:5].strip())
    got = _generate(chat_path, [{"id": i, "prompt": p, "seed": i} for i, p in enumerate(prompts)],
                    max_tokens=16, temperature=1.0, chat=True, stop=[stop])
    stopped = 0
    for i, tokens in ref.items():
        text = texts[i]
        if stop in text:
            stopped += 1
            n = next(k for k in range(1, len(tokens) + 1)
                     if stop in tok.decode(tokens[:k], skip_special_tokens=True))
            want_tokens, want_text, reason = tokens[:n], text[:text.index(stop)], "stop"
        else:
            want_tokens, want_text = tokens, text
            reason = "stop" if tokens[-1] == EOS else "length"
        assert got[i]["generated_ids"].tolist() == want_tokens, i
        assert got[i]["generated_text"] == want_text, i
        assert got[i]["finish_reason"] == reason, i
    assert stopped > 0


def test_rerank_bit_identical(hz, cluster, tmp_path_factory):
    from hubzoo.ray import Rerank

    path = tiny_encoders.build_cross_encoder("bert", tmp_path_factory.mktemp("ray_ce") / "ce", 1)
    rng = np.random.default_rng(3)
    pairs = [(tiny_encoders.CORPUS[rng.integers(len(tiny_encoders.CORPUS))],
              " ".join(rng.choice(" ".join(tiny_encoders.CORPUS).split(), size=rng.integers(1, 30))))
             for _ in range(400)]
    ref = hz.Reranker.from_pretrained(str(path), num_threads=2).predict(pairs, batch_size=7)
    ds = ray.data.from_items([{"id": i, "query": q, "document": d} for i, (q, d) in enumerate(pairs)])
    rows = ds.map_batches(Rerank, fn_constructor_kwargs={"model": str(path), "keep_columns": ["id"]},
                          batch_size=50, compute=ray.data.ActorPoolStrategy(size=2), num_cpus=1,
                          resources={NODE: 1}).take_all()
    assert set(rows[0]) == {"id", "score"}
    assert sorted(r["id"] for r in rows) == list(range(len(pairs)))
    for r in rows:
        assert np.float32(r["score"]) == ref[r["id"]], r["id"]


def test_generate_rows_bad_input(hz, lm_path):
    model = hz.CausalLM.from_pretrained(str(lm_path), num_threads=1)
    with pytest.raises(hz.InvalidArgument, match="seed has 1 values for 2 prompts"):
        model.generate_rows([[5, 6], [7]], seed=[1])
    with pytest.raises(hz.InvalidArgument, match="max_tokens must be >= 0"):
        model.generate_rows([[5, 6]], max_tokens=-1)
    assert model.generate_rows([[5, 6]], max_tokens=0) == [([], "length")]
    with pytest.raises(hz.InvalidArgument, match="stop must be a list, not one string"):
        model.generate_rows([[5, 6]], stop="x")
    with pytest.raises(hz.InvalidArgument, match="stop has 1 values for 2 prompts"):
        model.generate_rows([[5, 6], [7]], stop=[["a"]])


def test_generate_rows_stop_strings_end_rows_in_the_engine(hz, chat_path):
    """A stop string ends its row in the engine: the tokens end with the one completing it
    (none generated past it, so the row is shorter than its free run), the text ends before
    it, and rows without a stop string (or with their own) are unaffected."""
    tok = hz.Tokenizer.from_pretrained(str(chat_path))
    model = hz.CausalLM.from_pretrained(str(chat_path), num_threads=2)
    prompts = [tok.encode(f"Question {i}: {w}?").ids for i, w in enumerate(tiny_encoders.CORPUS)]
    free = model.generate_rows(prompts, max_tokens=24, temperature=1.0, seed=list(range(len(prompts))),
                               ignore_eos=True, return_text=True)
    for tokens, reason, text in free:
        assert reason == "length" and len(tokens) == 24
        assert text == tok.decode(tokens, skip_special_tokens=True)
    # Row 0's stop string: a piece of its own text past its first token; other rows get none.
    text0 = free[0][2]
    stop = next(text0[k:k + 3] for k in range(4, len(text0) - 3) if text0[k:k + 3].strip())
    stops = [[stop]] + [[] for _ in prompts[1:]]
    got = model.generate_rows(prompts, max_tokens=24, temperature=1.0, seed=list(range(len(prompts))),
                              ignore_eos=True, stop=stops, return_text=True)
    tokens0 = free[0][0]
    n = next(k for k in range(1, len(tokens0) + 1)
             if stop in tok.decode(tokens0[:k], skip_special_tokens=True))
    assert n < len(tokens0), "the stop string must end the row early for this test to mean anything"
    assert got[0] == (tokens0[:n], "stop", text0[:text0.index(stop)])
    assert got[1:] == free[1:]
    # Without return_text the rows are (tokens, reason), stopped the same way.
    assert model.generate_rows(prompts[:1], max_tokens=24, temperature=1.0, seed=0, ignore_eos=True,
                               stop=[stop])[0] == (tokens0[:n], "stop")


def test_run_batch_parquet_and_jsonl(hz, cluster, encoder_path, texts, ref_vectors, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from hubzoo.ray import run_batch

    n = min(300, len(texts))
    src = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"doc_id": [f"d{i}" for i in range(n)], "text": texts[:n]}), src)
    out = run_batch("embed", str(encoder_path), str(src), str(tmp_path / "out"), id_column="doc_id",
                    num_actors=1, batch_size=40)
    table = pq.read_table(out)
    assert set(table.column_names) == {"doc_id", "embedding"}
    got = dict(zip(table["doc_id"].to_pylist(), table["embedding"].to_numpy(zero_copy_only=False)))
    assert sorted(got) == sorted(f"d{i}" for i in range(n))
    for i in range(n):
        assert np.array_equal(np.asarray(got[f"d{i}"], np.float32), ref_vectors[i]), i

    import json

    jsrc = tmp_path / "corpus.jsonl"
    jsrc.write_text("".join(json.dumps({"id": i, "text": texts[i]}) + "\n" for i in range(50)))
    jout = run_batch("embed", str(encoder_path), str(jsrc), str(tmp_path / "out.jsonl"), num_actors=1)
    back = [json.loads(line) for f in sorted((tmp_path / "out.jsonl").glob("*.json*"))
            for line in f.read_text().splitlines()]
    assert sorted(r["id"] for r in back) == list(range(50)) and jout.endswith(".jsonl")
    for r in back:
        assert np.array_equal(np.asarray(r["embedding"], np.float32), ref_vectors[r["id"]])


def test_run_batch_bad_input(cluster, encoder_path, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from hubzoo.ray import run_batch

    src = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": ["a"]}), src)
    with pytest.raises(Exception, match="no id column 'id'"):
        run_batch("embed", str(encoder_path), str(src), str(tmp_path / "o"))
    with pytest.raises(Exception, match="task must be one of"):
        run_batch("summarize", str(encoder_path), str(src), str(tmp_path / "o"))


# --- Ray Serve -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_path(smollm2_path, tmp_path_factory):
    """A tiny random Llama with SmolLM2's tokenizer and chat template."""
    out = _util.tiny_models.build("llama_tied_llama3", tmp_path_factory.mktemp("ray_chat") / "chat",
                                  vocab_size=49152)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(smollm2_path / f, out / f)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(cluster, chat_path, hubzoo_bin):
    from ray import serve

    from hubzoo.ray.serve import build_app

    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(str(chat_path), num_replicas=2, num_cpus=1, max_concurrency=4, api_key=KEY,
                        served_model_name="tiny-chat", hubzoo_bin=str(hubzoo_bin),
                        health_check_period_s=1, health_check_timeout_s=10),
              name="hubzoo", route_prefix="/")
    yield f"http://127.0.0.1:{port}"
    serve.delete("hubzoo")


def _client(url):
    import openai

    return openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=120)


PROMPTS = ["Say something.", "What is Ray?", "Count to three.", "Name a colour."]


@pytest.fixture(scope="module")
def chat_ref(hz, chat_path):
    """prompt -> this process's greedy completion text (32 tokens or up to EOS)."""
    tok = hz.Tokenizer.from_pretrained(str(chat_path))
    model = hz.CausalLM.from_pretrained(str(chat_path), num_threads=2)
    out = {}
    for p in PROMPTS:
        ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                      tokenize=True)
        (tokens, _), = model.generate_rows([ids], max_tokens=32)
        out[p] = tok.decode([t for t in tokens if t != EOS], skip_special_tokens=True)
    return out


def _chat(client, prompt, stream):
    kw = dict(model="tiny-chat", messages=[{"role": "user", "content": prompt}], max_tokens=32,
              temperature=0)
    if not stream:
        return client.chat.completions.create(**kw).choices[0].message.content, True
    started, text = False, ""
    try:
        for chunk in client.chat.completions.create(stream=True, **kw):
            started = True
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
    except Exception as e:  # a stream cut after it started is allowed; report whether it had
        return e, started
    return text, True


def test_serve_chat_plain_and_streamed(served, chat_ref):
    c = _client(served)
    for p in PROMPTS[:2]:
        assert _chat(c, p, False)[0] == chat_ref[p]
        assert _chat(c, p, True)[0] == chat_ref[p]
    assert [m.id for m in c.models.list().data] == ["tiny-chat"]
    import openai

    with pytest.raises(openai.AuthenticationError):
        _client(served).with_options(api_key="wrong").chat.completions.create(
            model="tiny-chat", messages=[{"role": "user", "content": "x"}])


def _replicas(name: str) -> set[int]:
    return {p.pid for p in _descendants(f"ServeReplica:hubzoo:{name}")}


def _wait_replicas(count: int, exclude: set[int], timeout: float = 120) -> set[int]:
    from ray import serve

    deadline = time.time() + timeout
    while time.time() < deadline:
        pids = _replicas("HubzooEngine")
        status = serve.status().applications["hubzoo"].deployments["HubzooEngine"].status
        if len(pids) == count and not (pids & exclude) and str(status).endswith("HEALTHY"):
            return pids
        time.sleep(0.5)
    raise AssertionError(f"replicas not replaced: {_replicas('HubzooEngine')}, excluded {exclude}")


def _load_with_kill(url, kill) -> tuple[list, int]:
    """48 chats (half streamed) 16 at once; kill() once 4 have finished (more queued).
    Returns [(job, (text or exception, started))] and the ingress's retries."""
    import httpx

    c = _client(url)
    jobs = [(PROMPTS[i % len(PROMPTS)], i % 2 == 1) for i in range(48)]
    before = httpx.get(url + "/ingress/stats").json()["retried"]
    with ThreadPoolExecutor(16) as ex:
        futures = [ex.submit(_chat, c, *j) for j in jobs]
        deadline = time.time() + 120
        while sum(f.done() for f in futures) < 4 and time.time() < deadline:
            time.sleep(0.01)
        kill()
        results = [f.result() for f in futures]
    retried = httpx.get(url + "/ingress/stats").json()["retried"] - before
    return list(zip(jobs, results)), retried


def _check_no_loss(results, chat_ref):
    cut = 0
    for (prompt, stream), (out, started) in results:
        if isinstance(out, Exception):
            assert stream and started, f"a request lost before it started streaming: {out!r}"
            cut += 1
        else:
            assert out == chat_ref[prompt]
    return cut


def _kill_when_busy(replica: int, timeout: float = 10) -> None:
    """SIGKILL the replica once its engine (`hubzoo serve`, the replica's grandchild) is
    computing: a replica is idle for a moment each time its batch of requests finishes
    together, and a kill then finds nothing in flight."""
    deadline = time.time() + timeout
    try:
        server = next(p for p in psutil.Process(replica).children(recursive=True) if p.name() == "hubzoo")
        cpu = sum(server.cpu_times()[:2])
        while time.time() < deadline:
            time.sleep(0.02)
            now = sum(server.cpu_times()[:2])
            if now - cpu > 0.01:  # over half a core in the last 20 ms
                break
            cpu = now
    except (StopIteration, psutil.Error):
        pass  # no engine to watch (it died or was never seen): kill the replica now
    os.kill(replica, signal.SIGKILL)


def test_serve_replica_killed_under_load(served, chat_ref):
    # A kill that finds the victim idle proves nothing about retries: the kill waits for the
    # victim's engine to be computing, and the load runs again on the replaced pair (at most
    # 3 times) until a kill lands on a request in flight that had sent nothing yet.
    for attempt in range(3):
        before = _wait_replicas(2, set())
        victim = sorted(before)[0]
        results, retried = _load_with_kill(served, lambda: _kill_when_busy(victim))
        cut = _check_no_loss(results, chat_ref)
        after = _wait_replicas(2, {victim})
        assert len(after & before) == 1
        if retried:
            break
    assert retried >= 1, "no request was in flight on the killed replica in 3 tries"
    assert _chat(_client(served), PROMPTS[0], False)[0] == chat_ref[PROMPTS[0]]
    print(f"killed replica {victim}: {retried} requests retried, {cut} streams cut after starting")


def test_serve_engine_process_death_fails_health_check(served, chat_ref):
    before = _wait_replicas(2, set())
    deadline = time.time() + 60
    while True:  # both replicas' servers (a replica replaced just before may still be starting)
        servers = [p for p in _descendants("serve") if p.name() == "hubzoo"]
        if len(servers) == 2 or time.time() > deadline:
            break
        time.sleep(0.5)
    assert len(servers) == 2, servers
    victim = servers[0]
    owner = victim.parent().parent().pid  # replica -> watchdog -> hubzoo serve
    results, _ = _load_with_kill(served, lambda: victim.send_signal(signal.SIGKILL))
    _check_no_loss(results, chat_ref)
    after = _wait_replicas(2, {owner})  # the replica that lost its engine is replaced
    assert before - after == {owner}
