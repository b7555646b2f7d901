"""Tiny random T5 checkpoints (v1.0 and v1.1/FLAN-T5 shapes) built with transformers.

Parameters are randomised as hubzoo.testing.tiny_models randomises decoders (norm weights
1 + 0.1*randn, everything else 0.05*randn). v1.1 is written as the Hub's FLAN-T5 and mT5
checkpoints are: `tie_word_embeddings: false` and an lm_head.weight of its own (transformers
5 always ties lm_head to `shared` when it builds a T5, so the untied head is added after
saving; on load it sees two different tensors and keeps them apart).

    from hubzoo.testing import tiny_t5
    path = tiny_t5.build("t5_v1_1", tmp_dir)
    model = tiny_t5.load_hf(path)   # T5ForConditionalGeneration, eager attention, fp32
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# T5's own special ids: pad 0 (also the decoder start), eos 1.
SPECIAL_TOKENS = {"pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0}

VARIANTS: dict[str, dict[str, Any]] = {
    # v1.0: ReLU feed-forward, lm_head tied to `shared` with the d_model^-0.5 scale.
    "t5_v1_0": {
        "vocab_size": 1001,
        "d_model": 64,
        "d_kv": 16,
        "d_ff": 96,
        "num_layers": 2,
        "num_heads": 4,
        "feed_forward_proj": "relu",
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
        "untied": False,
    },
    # v1.1 / FLAN-T5: gated-GELU, untied head without scale, d_kv * heads != d_model,
    # more decoder layers than encoder layers, few buckets so long inputs reach the log bins.
    "t5_v1_1": {
        "vocab_size": 997,
        "d_model": 48,
        "d_kv": 20,
        "d_ff": 72,
        "num_layers": 2,
        "num_decoder_layers": 3,
        "num_heads": 3,
        "feed_forward_proj": "gated-gelu",
        "relative_attention_num_buckets": 16,
        "relative_attention_max_distance": 64,
        "untied": True,
    },
}

SEED = 1234


def build(variant: str, out_dir: str | Path, seed: int = SEED, **overrides: Any) -> Path:
    """Builds a variant with random weights into out_dir; returns out_dir."""
    import torch
    import transformers
    from safetensors.torch import load_file, save_file

    from hubzoo.testing import tiny_models

    if variant not in VARIANTS:
        raise KeyError(f"unknown tiny T5 {variant!r}; known: {sorted(VARIANTS)}")
    fields = {**VARIANTS[variant], **overrides}
    untied = fields.pop("untied")
    torch.manual_seed(seed)
    config = transformers.T5Config(**fields, **SPECIAL_TOKENS, dropout_rate=0.0)
    config.architectures = ["T5ForConditionalGeneration"]
    model = transformers.T5ForConditionalGeneration._from_config(
        config, attn_implementation="eager", dtype=torch.float32
    )
    tiny_models.randomise_(model, seed)
    model.eval()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    generation_config = transformers.GenerationConfig.from_model_config(model.config)
    for key, value in SPECIAL_TOKENS.items():
        setattr(generation_config, key, value)
    generation_config.save_pretrained(out)
    if untied:
        weights = load_file(out / "model.safetensors")
        generator = torch.Generator().manual_seed(seed + 1)
        weights["lm_head.weight"] = 0.05 * torch.randn(
            weights["shared.weight"].shape, generator=generator, dtype=torch.float32
        )
        save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
        cfg = json.loads((out / "config.json").read_text())
        cfg["tie_word_embeddings"] = False
        cfg.pop("scale_decoder_outputs", None)
        (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def load_hf(path: str | Path, dtype: str = "float32"):
    """T5ForConditionalGeneration in eval mode, eager attention, as users load it."""
    import torch
    import transformers

    model = transformers.T5ForConditionalGeneration.from_pretrained(
        path, dtype=getattr(torch, dtype), attn_implementation="eager"
    )
    model.eval()
    return model


def unigram_tokenizer():
    """A small Unigram tokenizer with T5's specials (<pad> 0, </s> 1, <unk> 2) that
    appends </s>, as T5's tokenizers do; about 220 tokens, trained on tiny_encoders.CORPUS."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    from hubzoo.testing import tiny_encoders

    specials = ["<pad>", "</s>", "<unk>"]  # T5's ids 0, 1, 2
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(tiny_encoders.CORPUS * 4, trainers.UnigramTrainer(
        vocab_size=220, special_tokens=specials, unk_token="<unk>", show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)])
    tok.decoder = decoders.Metaspace()
    return tok


def save_tokenizer(tok, out_dir: str | Path) -> None:
    """Saves a tokenizers.Tokenizer into out_dir as transformers' fast tokenizer files."""
    import transformers

    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, model_max_length=512, eos_token="</s>", pad_token="<pad>",
        unk_token="<unk>", model_input_names=["input_ids", "attention_mask"]).save_pretrained(out_dir)


def build_sentence_t5(out_dir: str | Path, seed: int = SEED) -> Path:
    """A sentence-T5/GTR-style sentence-transformers folder: a tiny random T5EncoderModel
    (v1.1 shapes) with a Unigram tokenizer appending </s>, mean Pooling, Dense without
    bias (Identity activation) and Normalize, saved by sentence-transformers itself."""
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from hubzoo.testing import tiny_encoders, tiny_models

    tok = unigram_tokenizer()
    fields = {k: v for k, v in VARIANTS["t5_v1_1"].items() if k != "untied"}
    fields["vocab_size"] = tok.get_vocab_size() + 3
    torch.manual_seed(seed)
    config = transformers.T5Config(**fields, **SPECIAL_TOKENS, dropout_rate=0.0)
    config.architectures = ["T5EncoderModel"]
    model = transformers.T5EncoderModel._from_config(config, attn_implementation="eager",
                                                     dtype=torch.float32)
    tiny_models.randomise_(model, seed)
    model.eval()
    out = Path(out_dir)
    hf_dir = out.parent / f"{out.name}.hf"
    hf_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(hf_dir, safe_serialization=True)
    save_tokenizer(tok, hf_dir)
    transformer = Transformer(str(hf_dir), max_seq_length=256)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    dense = Dense(pooling.get_embedding_dimension(), 40, bias=False,
                  activation_function=torch.nn.Identity())
    tiny_encoders.randomise_(dense, seed + 1)
    SentenceTransformer(modules=[transformer, pooling, dense, Normalize()], device="cpu").save(str(out))
    return out
