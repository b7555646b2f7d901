"""hubzoo on Ray: batch jobs with Ray Data and replicated serving with Ray Serve.

    pip install .[ray]

Batch (hubzoo.ray.data): callable classes for Dataset.map_batches that load a model once
per actor, and run_batch(), which reads a Parquet/JSONL corpus and writes the results
beside each row's id. Because hubzoo's kernels are batch-invariant, a row's embedding,
score or greedy (or seeded) completion is bit-identical whichever actor, node or batch
computed it, so a distributed job checks exactly against one process, and a retried
block cannot change a result.

Online (hubzoo.ray.serve): build_app() runs N replicas of `hubzoo serve` behind one
OpenAI-compatible endpoint (docs/ray.md).
"""

from .data import Embed, Generate, Rerank, actor_threads, run_batch  # noqa: F401

__all__ = ["Embed", "Generate", "Rerank", "actor_threads", "run_batch"]
