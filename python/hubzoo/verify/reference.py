"""The transformers side: models in fp32 and bf16 (eager attention), hooked forwards, greedy generate."""

from __future__ import annotations

import contextlib

import numpy as np

ATTN_IMPLEMENTATION = "eager"


@contextlib.contextmanager
def quiet_transformers():
    """transformers' warnings and weight-loading progress bars off, restored afterwards."""
    import transformers
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield transformers
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def load(snapshot: str, dtype: str = "float32"):
    """transformers with eager attention, eval mode, loaded as users load it.

    bf16 is from_pretrained(dtype=torch.bfloat16): that keeps the RoPE inv_freq buffer in
    fp32, where model.to(torch.bfloat16) would round it too and make transformers' own
    bf16 error (the ratio's denominator) larger than users see.
    """
    from hubzoo.testing.tiny_models import load_hf

    return load_hf(snapshot, dtype=dtype)


def layer_names(num_layers: int) -> list[str]:
    """The named intermediates compared layer by layer, in forward order."""
    return ["embed", *(f"layers.{i}" for i in range(num_layers)), "norm", "logits"]


def forward(model, ids: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One sequence [seq] -> (logits float32 [seq, vocab], {name: float32 [seq, hidden]}).

    Hooks name outputs as hubzoo's capture does: embed_tokens output, each decoder
    layer's output (`layers.{i}`), the final norm; `logits` is the lm_head output. Sparse
    MoE layers (an `mlp` with `gate` and `experts`; Gemma 4: a layer with `router` and
    `experts`) add `layers.{i}.mlp.router_logits` [seq, experts] and
    `layers.{i}.mlp.selected_experts` [seq, k] from the router.
    """
    import torch

    if hasattr(model, "verify_forward"):  # an encoder-decoder (verify/seq2seq.py)
        return model.verify_forward(ids)
    captured: dict[str, np.ndarray] = {}

    def hook(name):
        def fn(_module, _inputs, output):
            if isinstance(output, (tuple, list)):
                output = output[0]
            captured[name] = output.detach()[0].to(torch.float32).numpy().copy()

        return fn

    inner = getattr(model.model, "language_model", model.model)  # a multimodal model's text tower
    handles = [inner.embed_tokens.register_forward_hook(hook("embed"))]
    for i, layer in enumerate(inner.layers):
        handles.append(layer.register_forward_hook(hook(f"layers.{i}")))
        mlp = getattr(layer, "mlp", None)
        if mlp is not None and hasattr(mlp, "gate") and hasattr(mlp, "experts"):
            handles.append(mlp.gate.register_forward_hook(_router_hook(captured, i, model.config)))
        router = getattr(layer, "router", None)
        if router is not None and hasattr(layer, "experts"):  # Gemma4TextRouter
            handles += _gemma4_router_hooks(captured, i, router)
    handles.append(inner.norm.register_forward_hook(hook("norm")))
    try:
        with torch.no_grad():
            out = model(input_ids=torch.as_tensor(ids[None], dtype=torch.int64), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    logits = out.logits[0].to(torch.float32).numpy().copy()
    captured["logits"] = logits
    return logits, captured


def _router_hook(captured: dict, i: int, config):
    """Router logits and selected experts of sparse layer i (transformers 5's routers return
    (logits, weights, experts); a router that returns logits alone gets torch.topk of its softmax)."""
    import torch

    def fn(_module, _inputs, output):
        if isinstance(output, (tuple, list)):
            logits, experts = output[0], output[2]
        else:
            logits = output
            probs = torch.softmax(logits.float(), dim=-1)
            experts = torch.topk(probs, int(config.num_experts_per_tok), dim=-1).indices
        captured[f"layers.{i}.mlp.router_logits"] = logits.detach().reshape(-1, logits.shape[-1]) \
            .to(torch.float32).numpy().copy()
        captured[f"layers.{i}.mlp.selected_experts"] = experts.detach().reshape(-1, experts.shape[-1]) \
            .numpy().astype(np.int64)

    return fn


def _gemma4_router_hooks(captured: dict, i: int, router) -> list:
    """Gemma4TextRouter returns (probabilities, weights, experts): its logits are the
    output of router.proj, the experts its third output."""
    import torch

    def logits(_module, _inputs, output):
        captured[f"layers.{i}.mlp.router_logits"] = output.detach().reshape(-1, output.shape[-1]) \
            .to(torch.float32).numpy().copy()

    def experts(_module, _inputs, output):
        chosen = output[2]
        captured[f"layers.{i}.mlp.selected_experts"] = chosen.detach().reshape(-1, chosen.shape[-1]) \
            .numpy().astype(np.int64)

    return [router.proj.register_forward_hook(logits), router.register_forward_hook(experts)]


def generate(model, ids: np.ndarray, max_new_tokens: int) -> list[int]:
    """Greedy model.generate(do_sample=False): the new tokens of one sequence."""
    import torch

    if hasattr(model, "verify_generate"):  # an encoder-decoder (verify/seq2seq.py)
        return model.verify_generate(ids, max_new_tokens)
    t = torch.as_tensor(ids[None], dtype=torch.int64)
    kwargs = {}
    config = model.generation_config
    if config.pad_token_id is None and config.eos_token_id is not None:
        eos = config.eos_token_id
        kwargs["pad_token_id"] = eos[0] if isinstance(eos, (list, tuple)) else eos
    with torch.no_grad():
        out = model.generate(
            input_ids=t,
            attention_mask=torch.ones_like(t),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            **kwargs,
        )
    return [int(x) for x in out[0, t.shape[1]:]]
