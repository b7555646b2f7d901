"""The ladder on an encoder-decoder (T5, FLAN-T5, mT5): the same columns and checks as for a
decoder, over the decoder's positions.

Each input's tokens feed the encoder. The decoder reads a fixed, teacher-forced sequence:
the decoder start token, then the input's first DECODER_TOKENS - 1 tokens. Its logits are
what the rungs compare (logits, argmax, top-5, 8-sigma margins, KL, bf16 error ratio);
"cached decode" prefills part of that decoder sequence, then steps one token at a time
(cross-attention keys/values computed once); "greedy" is model.generate on the encoder
input. Per-layer rows name both stacks: encoder.embed, encoder.layers.{i}, encoder.norm,
decoder.embed, decoder.layers.{i}, decoder.norm, logits.

The harness keeps its decoder interface: wrappers here take the decoder sequence where a
decoder takes its ids and look up the encoder input it belongs to (Pairs).
"""

from __future__ import annotations

import numpy as np

from .inputs import Input

DECODER_TOKENS = 64


def is_seq2seq(config: dict) -> bool:
    return bool(config.get("is_encoder_decoder")) or config.get("model_type") in ("t5", "mt5")


def layer_names(config: dict) -> list[str]:
    enc = int(config.get("num_layers", 0))
    dec = int(config.get("num_decoder_layers") or enc)
    return ["encoder.embed", *(f"encoder.layers.{i}" for i in range(enc)), "encoder.norm",
            "decoder.embed", *(f"decoder.layers.{i}" for i in range(dec)), "decoder.norm", "logits"]


class Pairs:
    """Decoder sequence -> the encoder input it was built from."""

    def __init__(self, start_token: int):
        self.start = int(start_token)
        self._encoder: dict[tuple[int, ...], np.ndarray] = {}

    def decoder_input(self, inp: Input) -> Input:
        dec = np.concatenate([[self.start], inp.ids[: DECODER_TOKENS - 1]]).astype(np.int64)
        key = tuple(int(t) for t in dec)
        if key in self._encoder and not np.array_equal(self._encoder[key], inp.ids):
            raise ValueError(f"inputs share their first {DECODER_TOKENS - 1} tokens")
        self._encoder[key] = inp.ids
        return Input(inp.name, inp.kind, dec, f"decoder: start token + the first {len(dec) - 1} input "
                     f"tokens; encoder: {inp.description}")

    def encoder_ids(self, dec: np.ndarray) -> np.ndarray:
        return self._encoder[tuple(int(t) for t in np.asarray(dec).reshape(-1))]


def load_hf(snapshot: str, dtype: str):
    """T5ForConditionalGeneration (or the config's seq2seq class), eager attention, eval mode,
    from_pretrained(dtype=...) as users load it (T5 keeps wo in fp32 under bf16 itself)."""
    import torch
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(
        snapshot, dtype=getattr(torch, dtype), attn_implementation="eager")
    model.eval()
    return model


class HFReference:
    """transformers' model behind reference.forward / reference.generate (decoder ids in)."""

    def __init__(self, model, pairs: Pairs):
        self.model = model
        self.pairs = pairs

    def verify_forward(self, dec: np.ndarray):
        import torch

        enc = self.pairs.encoder_ids(dec)
        captured: dict[str, np.ndarray] = {}
        handles = []

        def hook(name):
            def fn(_m, _i, out):
                out = out[0] if isinstance(out, (tuple, list)) else out
                captured[name] = out.detach()[0].to(torch.float32).numpy().copy()
            return fn

        for stack in ("encoder", "decoder"):
            s = getattr(self.model, stack)
            handles.append(s.embed_tokens.register_forward_hook(hook(f"{stack}.embed")))
            for i, block in enumerate(s.block):
                handles.append(block.register_forward_hook(hook(f"{stack}.layers.{i}")))
            handles.append(s.final_layer_norm.register_forward_hook(hook(f"{stack}.norm")))
        try:
            with torch.no_grad():
                out = self.model(input_ids=torch.as_tensor(enc[None]),
                                 decoder_input_ids=torch.as_tensor(np.asarray(dec)[None]), use_cache=False)
        finally:
            for h in handles:
                h.remove()
        logits = out.logits[0].to(torch.float32).numpy().copy()
        captured["logits"] = logits
        return logits, captured

    def verify_generate(self, dec: np.ndarray, max_new_tokens: int) -> list[int]:
        import torch
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        enc = torch.as_tensor(self.pairs.encoder_ids(dec)[None])
        with torch.no_grad():  # a cache without a config: num_decoder_layers may differ
            out = self.model.generate(input_ids=enc, attention_mask=torch.ones_like(enc), do_sample=False,
                                      max_new_tokens=max_new_tokens,
                                      past_key_values=EncoderDecoderCache(DynamicCache(), DynamicCache()))
        return [int(x) for x in out[0, 1:]]  # after the decoder start token


class Ours:
    """hubzoo.Seq2SeqLM with the CausalLM calls the harness makes (decoder ids in)."""

    def __init__(self, lm, pairs: Pairs):
        self.lm = lm
        self.pairs = pairs
        self.capture_names = lm.capture_names

    def _enc(self, dec: np.ndarray) -> np.ndarray:
        return self.pairs.encoder_ids(dec)[None]

    def forward(self, ids: np.ndarray, capture=()):
        logits, captured = self.lm.forward(self._enc(ids), ids, capture=list(capture))
        return logits, captured

    def forward_incremental(self, ids: np.ndarray, prefill_len: int, capture=()):
        return self.lm.forward_incremental(self._enc(ids), ids, prefill_len, capture=list(capture))

    def generate(self, ids: np.ndarray, max_new_tokens: int) -> np.ndarray:
        out = self.lm.generate(self._enc(ids), max_new_tokens=max_new_tokens)[0]
        eos = set(self.lm.eos_token_ids)
        toks = []
        for t in out.tolist():  # padding after EOS is not generated
            toks.append(t)
            if t in eos:
                break
        return np.asarray([toks], dtype=np.int64)
