"""Ray Data callables: a model loaded once per actor, batches of rows in, rows out.

    import ray
    from hubzoo.ray import Embed
    ds = ray.data.read_parquet("corpus/")                      # columns: id, text
    ds = ds.map_batches(Embed, fn_constructor_kwargs={"model": "BAAI/bge-small-en-v1.5"},
                        compute=ray.data.ActorPoolStrategy(size=4), num_cpus=2, batch_size=64)
    ds.write_parquet("vectors/")                               # id, text, embedding

Each callable returns its input batch with its output columns added, so every row keeps its
id (and whatever else it carried). An actor runs hubzoo on as many threads as Ray gave it
CPUs (num_cpus of map_batches), so actors never oversubscribe a node. Outputs depend only on
the row: a text's vector, a pair's score and a prompt's greedy or seeded completion are
bit-identical on any actor, node, batch or thread count (docs/design.md, batch invariance).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

import hubzoo
from hubzoo import InvalidArgument

# Generate's sampling settings a column of the same name may set per row.
_ROW_SETTINGS = ("max_tokens", "temperature", "top_k", "top_p", "seed")


def actor_threads(default: int = 1) -> int:
    """hubzoo threads for the current Ray worker: the CPUs Ray assigned it (at least 1);
    default outside Ray or when none were assigned."""
    try:
        import ray

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    except Exception:  # not in a Ray worker
        cpus = None
    return max(1, int(cpus)) if cpus else default


def _column(batch: dict, name: str, role: str) -> np.ndarray:
    if name not in batch:
        raise InvalidArgument(f"the batch has no {role} column {name!r} (columns: {sorted(batch)})")
    return batch[name]


def _texts(values, name: str) -> list[str]:
    out = []
    for i, t in enumerate(values):
        if not isinstance(t, str):
            raise InvalidArgument(f"column {name!r} row {i} must be a string, got {type(t).__name__}")
        out.append(t)
    return out


def _ragged(rows: Sequence[Sequence[int]]) -> np.ndarray:
    """A column of int64 arrays of different lengths (Ray stores it as a ragged tensor)."""
    col = np.empty(len(rows), dtype=object)
    for i, r in enumerate(rows):
        col[i] = np.asarray(r, dtype=np.int64)
    return col


def _output(batch: dict, keep: Sequence[str] | None, new: dict) -> dict:
    """The input columns (only those named in keep, when given) and the new ones."""
    if keep is None:
        return {**batch, **new}
    missing = [c for c in keep if c not in batch]
    if missing:
        raise InvalidArgument(f"the batch has no column {missing[0]!r} to keep (columns: {sorted(batch)})")
    return {**{c: batch[c] for c in keep}, **new}


class Embed:
    """Sentence embeddings of a text column (hubzoo.Embedder.encode): adds
    output_column, float32 [rows, dimension]."""

    def __init__(self, model: str, *, text_column: str = "text", output_column: str = "embedding",
                 dtype: str = "float32", mode: str = "fused", num_threads: int = 0,
                 normalize: bool | None = None, prompt_name: str | None = None,
                 prompt: str | None = None, batch_size: int = 32,
                 keep_columns: Sequence[str] | None = None):
        self.text_column, self.output_column = text_column, output_column
        self.keep = keep_columns
        self.options = {"normalize": normalize, "prompt_name": prompt_name, "prompt": prompt,
                        "batch_size": batch_size}
        self.embedder = hubzoo.Embedder.from_pretrained(
            model, dtype=dtype, mode=mode, num_threads=num_threads or actor_threads())

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        texts = _texts(_column(batch, self.text_column, "text"), self.text_column)
        vectors = self.embedder.encode(texts, **self.options)
        vectors = vectors.reshape(len(texts), self.embedder.dimension)
        return _output(batch, self.keep, {self.output_column: vectors})


class Rerank:
    """Relevance scores of (query, document) columns (hubzoo.Reranker.predict): adds
    output_column, float32 [rows] (or [rows, num_labels])."""

    def __init__(self, model: str, *, query_column: str = "query",
                 document_column: str = "document", output_column: str = "score",
                 dtype: str = "float32", mode: str = "fused", num_threads: int = 0,
                 max_length: int | None = None, raw: bool = False,
                 instruction: str | None = None, batch_size: int = 32,
                 keep_columns: Sequence[str] | None = None):
        self.query_column, self.document_column = query_column, document_column
        self.keep = keep_columns
        self.output_column = output_column
        self.options = {"raw": raw, "instruction": instruction, "batch_size": batch_size}
        self.reranker = hubzoo.Reranker.from_pretrained(
            model, dtype=dtype, mode=mode, num_threads=num_threads or actor_threads(),
            max_length=max_length)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        queries = _texts(_column(batch, self.query_column, "query"), self.query_column)
        docs = _texts(_column(batch, self.document_column, "document"), self.document_column)
        scores = self.reranker.predict(list(zip(queries, docs)), **self.options)
        return _output(batch, self.keep, {self.output_column: scores})


class Generate:
    """Completions of a prompt column: each row one request to hubzoo's scheduler, all rows
    of a batch generated together.

    A prompt is a list of token ids, or a string (encoded with the model's tokenizer; with
    chat=True sent as one user message through the chat template). max_tokens, temperature,
    top_k, top_p and seed apply to every row unless the batch has a column of that name,
    which sets it per row (per-row seeds). Stops: the model's EOS ids (unless ignore_eos),
    stop_token_ids, and stop strings (need a tokenizer; the engine ends the row on the
    first, its text cut before it, its tokens through the one that completed it).

    Adds generated_ids (int64 per row), finish_reason ("stop" / "length") and, with a
    tokenizer, generated_text.
    """

    def __init__(self, model: str, *, prompt_column: str = "prompt", max_tokens: int = 32,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 stop: Sequence[str] | None = None, stop_token_ids: Sequence[int] | None = None,
                 ignore_eos: bool = False, chat: bool = False, skip_special_tokens: bool = True,
                 dtype: str = "float32", mode: str = "fused", num_threads: int = 0,
                 tokenizer: bool | None = None, keep_columns: Sequence[str] | None = None):
        self.prompt_column, self.keep = prompt_column, keep_columns
        self.settings = {"max_tokens": max_tokens, "temperature": temperature, "top_k": top_k,
                         "top_p": top_p, "seed": seed}
        self.stop = [s for s in (stop or []) if s]
        self.stop_token_ids = [int(t) for t in (stop_token_ids or [])]
        self.ignore_eos, self.chat, self.skip_special = ignore_eos, chat, skip_special_tokens
        self.model = hubzoo.CausalLM.from_pretrained(
            model, dtype=dtype, mode=mode, num_threads=num_threads or actor_threads())
        self.tokenizer = None
        if tokenizer or (tokenizer is None and (Path(self.model.info["snapshot"]) / "tokenizer.json").exists()):
            self.tokenizer = hubzoo.Tokenizer.from_pretrained(self.model.info["snapshot"])
        if (self.stop or chat) and self.tokenizer is None:
            raise InvalidArgument("stop strings and chat=True need the model's tokenizer.json")

    def _prompt_ids(self, value: Any, row: int) -> list[int]:
        if isinstance(value, str):
            if self.tokenizer is None:
                raise InvalidArgument(f"prompt row {row} is text but the model has no tokenizer.json")
            if self.chat:
                return self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": value}], add_generation_prompt=True, tokenize=True)
            return self.tokenizer.encode(value).ids
        ids = np.asarray(value)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise InvalidArgument(f"prompt row {row} must be a string or a list of token ids")
        return [int(t) for t in ids]

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        prompts = [self._prompt_ids(v, i)
                   for i, v in enumerate(_column(batch, self.prompt_column, "prompt"))]
        per_row = {k: (list(batch[k]) if k in batch else v) for k, v in self.settings.items()}
        # The engine ends a row on its stop string (as for a server request) and releases
        # the text before it; a stopped row's tokens end with the one completing it.
        with_text = self.tokenizer is not None
        done = self.model.generate_rows(prompts, stop_token_ids=self.stop_token_ids,
                                        ignore_eos=self.ignore_eos, stop=self.stop,
                                        skip_special_tokens=self.skip_special,
                                        return_text=with_text, **per_row)
        out = {}
        if with_text:
            out["generated_text"] = np.array([row[2] for row in done], dtype=object)
        out["generated_ids"] = _ragged([row[0] for row in done])
        out["finish_reason"] = np.array([row[1] for row in done], dtype=object)
        return _output(batch, self.keep, out)


_TASKS = {"embed": Embed, "rerank": Rerank, "generate": Generate}


def _read(path: str):
    import ray

    p = str(path)
    if p.endswith((".jsonl", ".json")) or (Path(p).is_dir() and any(Path(p).glob("*.json*"))):
        return ray.data.read_json(p)
    return ray.data.read_parquet(p)


def run_batch(task: str, model: str, input_path: str, output_path: str, *,
              id_column: str = "id", keep_columns: Sequence[str] = (), num_actors: int = 1,
              num_cpus: float = 1, batch_size: int = 64, **options) -> str:
    """Reads a Parquet or JSONL corpus (a file or a folder), runs task ("embed", "generate"
    or "rerank") on num_actors actors of num_cpus CPUs each (hubzoo threads = num_cpus),
    and writes id_column, keep_columns and the task's outputs to output_path (a folder:
    JSONL files when its name ends in .jsonl or .json, else Parquet). options go to the
    callable (Embed, Generate, Rerank). Returns output_path."""
    import ray

    if task not in _TASKS:
        raise InvalidArgument(f"task must be one of {sorted(_TASKS)}, got {task!r}")
    if num_actors < 1 or batch_size < 1 or num_cpus <= 0:
        raise InvalidArgument("num_actors, batch_size and num_cpus must be positive")
    ds = _read(input_path)
    if id_column not in ds.columns():
        raise InvalidArgument(f"{input_path} has no id column {id_column!r} (columns: {ds.columns()})")
    kwargs = {"model": model, "keep_columns": [id_column, *keep_columns], **options}
    ds = ds.map_batches(_TASKS[task], fn_constructor_kwargs=kwargs,
                        compute=ray.data.ActorPoolStrategy(size=num_actors), num_cpus=num_cpus,
                        batch_size=batch_size)
    out = str(output_path)
    if out.endswith((".jsonl", ".json")):
        ds.write_datasink(_jsonl_sink(out))
    else:
        ds.write_parquet(out)
    return out


def _json_value(v):
    """numpy values as JSON: float32 widened to float64 exactly, so repr round-trips the bits."""
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return v


def _jsonl_sink(path: str):
    """A Ray datasink writing one JSON object per row. Ray's write_json goes through pandas,
    which prints floats with 10 decimals: a float32 vector would not read back bit-identical;
    json.dumps prints the shortest text that does."""
    import json

    from ray.data.datasource import BlockBasedFileDatasink

    class JsonLinesSink(BlockBasedFileDatasink):
        def __init__(self, out: str):
            super().__init__(out, file_format="jsonl")

        def write_block_to_file(self, block, file):
            lines = [json.dumps({k: _json_value(v) for k, v in row.items()}, ensure_ascii=False)
                     for row in block.iter_rows(public_row_format=False)]
            file.write(("\n".join(lines) + "\n").encode() if lines else b"")

    return JsonLinesSink(path)
