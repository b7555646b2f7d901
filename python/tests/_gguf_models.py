"""Tiny random decoders written as GGUF files, the way llama.cpp's converter lays them out.

A tiny Llama (or Qwen2) is built with transformers from a config and randomised as every
tiny model is (norms 1 + 0.1 randn, the rest 0.05 randn); its weights are written with the
`gguf` package's GGUFWriter under llama.cpp's tensor names, q/k rows permuted as
convert_hf_to_gguf.py permutes them for llama, every matrix in one block type. The blocks
come from gguf-py's own quantizer where it has the type (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) and
from hubzoo's llama.cpp reference quantizer otherwise (the K types). transformers reads the
file back with from_pretrained(dir, gguf_file=...), dequantizing every tensor with gguf-py:
that is the reference hubzoo's exact mode must match.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, LAYERS, VOCAB = 256, 512, 4, 2, 64, 2, 300

GGML_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]


def build_hf(arch: str, tied: bool, seed: int = 0):
    import torch
    import transformers

    from hubzoo.testing import tiny_models

    cls = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[arch]
    config = cls(hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                 num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
                 vocab_size=VOCAB, max_position_embeddings=512, rms_norm_eps=1e-5,
                 tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2)
    config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tiny_models.randomise_(model, seed)
    return model.eval()


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row interleave (convert_hf_to_gguf.LlamaModel.permute)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


# Types no quantizer here writes: random blocks with their fp16 scales set to (byte
# offset, value) pairs that keep the weights at the scale of a real layer's.
RANDOM_BLOCKS = {
    "Q2_K": [(80, 2e-3), (82, 1e-3)],
    "Q3_K": [(108, 1e-3)],
    "Q5_K": [(0, 1e-4), (2, 1e-4)],
    "Q6_K": [(208, 2e-5)],
}


def _random_blocks(n: int, k: int, qtype: str, seed: int) -> np.ndarray:
    import gguf

    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n, k // block_elems, block_bytes), dtype=np.uint8)
    for offset, value in RANDOM_BLOCKS[qtype]:
        d = (value * (1 + 0.5 * rng.random((n, k // block_elems)))).astype(np.float16)
        blocks[:, :, offset:offset + 2] = d.view(np.uint8).reshape(n, k // block_elems, 2)
    return blocks.reshape(n, -1)


def _quantize(w: np.ndarray, qtype: str, seed: int = 0) -> tuple[np.ndarray, object]:
    import gguf

    from hubzoo import _hubzoo

    t = gguf.GGMLQuantizationType[qtype]
    w = np.ascontiguousarray(w, dtype=np.float32)
    if qtype in RANDOM_BLOCKS and not _hubzoo.quant.can_quantize(qtype):
        return _random_blocks(w.shape[0], w.shape[1], qtype, seed), t
    try:
        return gguf.quants.quantize(w, t), t
    except NotImplementedError:  # gguf-py has no quantizer for the K types: hubzoo's
        rows = [np.asarray(_hubzoo.quant.quantize(qtype, r), dtype=np.uint8) for r in w]
        return np.stack(rows), t


def write_gguf(model, arch: str, path: Path, qtype: str, output_type: str = "Q6_K") -> Path:
    """The model as a GGUF file: matrices in `qtype` (the untied output in `output_type`,
    as llama.cpp's Q4_K_M keeps it), norms and biases F32."""
    import gguf

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(512)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(INTER)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    # A byte-level vocabulary, so the file is complete as a tokenizer too.
    tokens = [f"<t{i}>" for i in range(VOCAB)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * VOCAB)
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    seeds = iter(range(1000))

    def matrix(name, value, t=qtype):
        data, ggml_type = _quantize(value, t, seed=next(seeds))
        w.add_tensor(name, data, raw_dtype=ggml_type)  # shape from the bytes per row

    def vector(name, value):
        w.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))

    matrix("token_embd.weight", sd["model.embed_tokens.weight"])
    vector("output_norm.weight", sd["model.norm.weight"])
    if "lm_head.weight" in sd and not model.config.tie_word_embeddings:
        matrix("output.weight", sd["lm_head.weight"], output_type)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        q, k = sd[p + "self_attn.q_proj.weight"], sd[p + "self_attn.k_proj.weight"]
        if arch == "llama":
            q, k = _permute(q, HEADS), _permute(k, KV_HEADS)
        matrix(f"blk.{i}.attn_q.weight", q)
        matrix(f"blk.{i}.attn_k.weight", k)
        matrix(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        matrix(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        for proj in ("q", "k", "v"):
            bias = sd.get(p + f"self_attn.{proj}_proj.bias")
            if bias is not None:
                vector(f"blk.{i}.attn_{proj}.bias", bias)
        matrix(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        matrix(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        matrix(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
        vector(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        vector(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def load_reference(path: Path):
    """transformers' model from the file (every tensor dequantized by gguf-py), fp32, eager."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager")
    return model.eval()
