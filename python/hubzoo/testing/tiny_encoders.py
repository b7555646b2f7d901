"""Tiny random encoders and sentence-transformers pipelines, for embedding parity tests.

Encoders (BERT, RoBERTa, XLM-RoBERTa) and decoders (Qwen3, Llama, bidirectional Gemma 3) are built with
transformers from a config, every parameter randomised (norm weights 1 + 0.1*randn,
everything else, biases included, 0.05*randn), with irregular shapes (odd head sizes,
vocabularies that are not a multiple of 8) and RoBERTa-style pad ids where the position
offset matters (XLM-R's pad is id 5, so its positions start at 6). Each gets a small
tokenizer trained here, then a sentence-transformers pipeline is assembled with
sentence-transformers' own classes (Transformer, Pooling, Dense, Normalize) and saved.

    from hubzoo.testing import tiny_encoders
    path = tiny_encoders.build("bert_mean_dense", tmp_dir)     # a sentence-transformers snapshot
    st = tiny_encoders.load_st(path)                           # SentenceTransformer, fp32
"""

from __future__ import annotations

import copy
import json
import importlib.util
import sys
from pathlib import Path
from typing import Any

SEED = 4321

# A small corpus the tokenizers are trained on (and tests draw texts from).
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Sentence embeddings map text to vectors that capture meaning.",
    "A native engine should match sentence-transformers exactly, padding or not.",
    "Hugging Face Hub checkpoints are loaded straight from their files.",
    "Tokenizers split words into pieces; rare words become several pieces.",
    "Mean pooling averages token vectors, CLS pooling takes the first one.",
    "Ünïcödé, accents and emoji 🙂 should not break anything at all.",
    "Numbers like 3.14159, 2048 and 1e-5 appear in technical text.",
    "Short one.",
    "Retrieval models use prompts such as 'query: ' and 'passage: ' before the text.",
    "The weather today is sunny with a light breeze from the west.",
    "Batch invariance means a sentence gives the same bits alone or in a batch.",
]

# Encoder families: name -> (architecture, config fields, tokenizer kind, special tokens).
ENCODERS: dict[str, tuple[str, dict[str, Any], str, list[str]]] = {
    "bert": (
        "BertModel",
        {
            "hidden_size": 84,
            "num_attention_heads": 4,  # head size 21
            "intermediate_size": 148,
            "num_hidden_layers": 2,
            "max_position_embeddings": 64,
            "type_vocab_size": 2,
            "layer_norm_eps": 1e-12,
            "pad_token_id": 0,
        },
        "wordpiece",
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
    ),
    "roberta": (
        "RobertaModel",
        {
            "hidden_size": 90,
            "num_attention_heads": 6,  # head size 15
            "intermediate_size": 170,
            "num_hidden_layers": 2,
            "max_position_embeddings": 70,
            "type_vocab_size": 1,
            "layer_norm_eps": 1e-5,
            "pad_token_id": 1,  # positions start at 2
            "bos_token_id": 0,
            "eos_token_id": 2,
        },
        "bytelevel",
        ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
    ),
    "xlm_roberta": (
        "XLMRobertaModel",
        {
            "hidden_size": 76,
            "num_attention_heads": 4,  # head size 19
            "intermediate_size": 136,
            "num_hidden_layers": 3,
            "max_position_embeddings": 80,
            "type_vocab_size": 1,
            "layer_norm_eps": 1e-5,
            "pad_token_id": 5,  # positions start at 6
            "bos_token_id": 0,
            "eos_token_id": 2,
        },
        "unigram",
        ["<s>", "<unk>", "</s>", "<mask>", "<extra>", "<pad>"],
    ),
    # Decoders used as embedders (Qwen3-Embedding style): the last hidden state is the
    # final norm output.
    "qwen3": (
        "Qwen3ForCausalLM",
        {
            "hidden_size": 64,
            "num_attention_heads": 4,
            "head_dim": 24,
            "num_key_value_heads": 2,
            "intermediate_size": 136,
            "num_hidden_layers": 2,
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        },
        "bytelevel_eos",
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    ),
    "llama": (
        "LlamaForCausalLM",
        {
            "hidden_size": 48,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "intermediate_size": 100,
            "num_hidden_layers": 2,
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        },
        "bytelevel_eos",
        ["<|endoftext|>", "<s>"],
    ),
    # EmbeddingGemma style: Gemma3TextModel with use_bidirectional_attention (every layer
    # attends both ways; a sliding layer within sliding_window // 2 + 1 = 5, which the
    # pipeline's 48-token texts cross), q/k norms, per-layer-type RoPE, untied (no lm_head).
    "gemma3_bidirectional": (
        "Gemma3TextModel",
        {
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 24,
            "intermediate_size": 120,
            "num_hidden_layers": 3,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "sliding_window": 8,
            "use_bidirectional_attention": True,
            "query_pre_attn_scalar": 24,
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-6,
            "hidden_activation": "gelu_pytorch_tanh",
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            },
        },
        "bytelevel_bos_eos",
        ["<pad>", "<eos>", "<bos>"],
    ),
}

# sentence-transformers pipelines: name -> what to build around an encoder.
#   pooling: a mode or a tuple of modes; dense: (out_features, bias, activation), a list of
#   them (one Dense module each), or None;
#   sbert_config: fields added to sentence_bert_config.json after saving;
#   causal_checkpoint: keep the CausalLM checkpoint (model.* names, lm_head) instead of the
#   base model sentence-transformers saves.
PIPELINES: dict[str, dict[str, Any]] = {
    "bert_mean_dense": {
        "encoder": "bert",
        "pooling": "mean",
        "dense": (50, True, "Tanh"),
        "normalize": True,
        "max_seq_length": 40,  # in tokenizer_config.json, as sentence-transformers 6 saves it
        "sbert_config": {"max_seq_length": 32},  # wins over it
        "prompts": {"query": "query: ", "passage": "passage: "},
    },
    "bert_cls_max_prompt": {
        "encoder": "bert",
        "pooling": ("cls", "max"),
        "include_prompt": False,
        "dense": None,
        "normalize": False,
        "max_seq_length": 48,
        "prompts": {"query": "search query: ", "none": ""},
        "default_prompt_name": "query",
    },
    "roberta_weighted": {
        "encoder": "roberta",
        "pooling": ("weightedmean", "mean_sqrt_len_tokens"),
        "dense": (64, False, "Identity"),
        "normalize": True,
        "max_seq_length": 40,
        "prompts": {"query": "Represent this: "},
    },
    "xlmr_mean_prompt": {
        "encoder": "xlm_roberta",
        "pooling": ("mean", "lasttoken"),
        "include_prompt": False,
        "dense": (33, True, "Tanh"),
        "normalize": True,
        "max_seq_length": 24,
        # Older sentence-transformers wrote these here; the Unigram tokenizer is case-sensitive.
        "sbert_config": {"do_lower_case": True},
        "prompts": {"query": "query: "},
    },
    "qwen3_lasttoken": {
        "encoder": "qwen3",
        "pooling": "lasttoken",
        "dense": None,
        "normalize": True,
        "max_seq_length": 64,
        "prompts": {"query": "Instruct: find the passage\nQuery: "},
    },
    "llama_causal_mean": {
        "encoder": "llama",
        "pooling": "mean",
        "include_prompt": False,
        "dense": (40, True, "Tanh"),
        "normalize": False,
        "max_seq_length": 64,
        "prompts": {"query": "query: "},
        "causal_checkpoint": True,
    },
    # The untied Llama as sentence-transformers saves it: bare LlamaModel names and no
    # lm_head, which only an encoder can load.
    "llama_base_lasttoken": {
        "encoder": "llama",
        "pooling": "lasttoken",
        "dense": None,
        "normalize": True,
        "max_seq_length": 64,
    },
    # EmbeddingGemma's pipeline: mean pooling, two Dense layers without bias (Identity), Normalize,
    # query/document prompts (config_sentence_transformers.json).
    "gemma_embedding": {
        "encoder": "gemma3_bidirectional",
        "pooling": "mean",
        "dense": [(96, False, "Identity"), (48, False, "Identity")],
        "normalize": True,
        "max_seq_length": 48,
        "prompts": {"query": "task: search result | query: ", "document": "title: none | text: "},
    },
}


def _tiny_models():
    """The sibling tiny_models module, also when this file is loaded by path."""
    name = "hubzoo_testing_tiny_models"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).with_name("tiny_models.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def randomise_(module, seed: int = SEED) -> None:
    """Norm weights 1 + 0.1*randn (LayerNorm/RMSNorm weights); every other parameter,
    norm biases included, 0.05*randn."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            owner = module.get_submodule(name.rsplit(".", 1)[0]) if "." in name else module
            if "norm" in type(owner).__name__.lower() and name.endswith("weight"):
                param.copy_(1.0 + 0.1 * noise)
            else:
                param.copy_(0.05 * noise)


def _corpus_words(normalizer, pre_tokenizer):
    """CORPUS's pre-tokenized words and their counts, in order of first appearance."""
    from collections import Counter

    return Counter(w for line in CORPUS
                   for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line)))


def _wordpiece_vocab(normalizer, pre_tokenizer, specials: list[str], size: int) -> dict[str, int]:
    """A WordPiece vocabulary of CORPUS, the same in every process: the specials, every
    character (word-initial, and "##" continuing), then whole words and continuing pieces of
    2-4 characters, most frequent first (ties in string order), up to `size`.
    tokenizers' WordPieceTrainer breaks ties between equally frequent merges in hash order,
    which differs between processes: each run of the suite tokenized the tests' texts
    differently, and the bf16 error ratios measured on them moved with it (bert eager
    0.68-1.28 against a bound of 1.15)."""
    from collections import Counter

    words = _corpus_words(normalizer, pre_tokenizer)
    chars = sorted({w[0] for w in words}) + sorted({"##" + c for w in words for c in w[1:]})
    pieces = Counter()
    for w, n in words.items():
        pieces[w] += n
        for i in range(1, len(w)):
            if 2 <= len(w) - i <= 4:
                pieces["##" + w[i:]] += n
    vocab = list(specials) + [c for c in chars if c not in specials]
    for piece, _ in sorted(pieces.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(vocab) >= size:
            break
        if piece not in vocab:
            vocab.append(piece)
    return {t: i for i, t in enumerate(vocab)}


def _unigram_vocab(normalizer, pre_tokenizer, specials: list[str], size: int) -> list[tuple[str, float]]:
    """A Unigram vocabulary of CORPUS, the same in every process (UnigramTrainer's is not,
    as WordPieceTrainer's): the specials, every character, then the substrings of 2-6
    characters of the pre-tokenized words (whole words included), most frequent first (ties
    in string order), up to `size`; each scored by the log of its frequency."""
    import math
    from collections import Counter

    words = _corpus_words(normalizer, pre_tokenizer)
    chars, pieces = Counter(), Counter()
    for w, n in words.items():
        for i in range(len(w)):
            chars[w[i]] += n
            for j in range(i + 2, min(len(w), i + 6) + 1):
                pieces[w[i:j]] += n
    ranked = sorted(chars.items(), key=lambda kv: kv[0]) + sorted(
        pieces.items(), key=lambda kv: (-kv[1], kv[0]))
    total = sum(chars.values())
    vocab = [(s, 0.0) for s in specials]
    for piece, n in ranked:
        if len(vocab) >= size:
            break
        vocab.append((piece, math.log(n / total)))
    return vocab


def _train_tokenizer(kind: str, specials: list[str]):
    """A tokenizers.Tokenizer trained on CORPUS; specials get ids 0.. in order."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    corpus = CORPUS * 4
    if kind == "wordpiece":  # BERT: [CLS] text [SEP]
        normalizer = normalizers.BertNormalizer(lowercase=True)
        pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok = Tokenizer(models.WordPiece(_wordpiece_vocab(normalizer, pre_tokenizer, specials, 260),
                                         unk_token="[UNK]"))
        tok.normalizer = normalizer
        tok.pre_tokenizer = pre_tokenizer
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        tok.decoder = decoders.WordPiece()
    elif kind == "bytelevel":  # RoBERTa: <s> text </s>
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.train_from_iterator(corpus, trainers.BpeTrainer(
            vocab_size=380, special_tokens=specials, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
            trim_offsets=True, add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    elif kind == "unigram":  # XLM-R: <s> text </s>, sentencepiece-style metaspace
        normalizer, pre_tokenizer = normalizers.NFKC(), pre_tokenizers.Metaspace()
        tok = Tokenizer(models.Unigram(_unigram_vocab(normalizer, pre_tokenizer, specials, 220),
                                       unk_id=specials.index("<unk>")))
        tok.normalizer = normalizer
        tok.pre_tokenizer = pre_tokenizer
        bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", bos), ("</s>", eos)])
        tok.decoder = decoders.Metaspace()
    elif kind == "bytelevel_bos_eos":  # EmbeddingGemma style: <bos> text <eos>
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.train_from_iterator(corpus, trainers.BpeTrainer(
            vocab_size=360, special_tokens=specials, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A <eos>", pair="<bos> $A <eos> $B:1 <eos>:1",
            special_tokens=[("<bos>", tok.token_to_id("<bos>")), ("<eos>", tok.token_to_id("<eos>"))])
        tok.decoder = decoders.ByteLevel()
    elif kind == "bytelevel_eos":  # Qwen3-Embedding style: text <|endoftext|>
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.train_from_iterator(corpus, trainers.BpeTrainer(
            vocab_size=360, special_tokens=specials, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        eos = specials[0]
        tok.post_processor = processors.TemplateProcessing(
            single=f"$A {eos}", pair=f"$A {eos} $B:1 {eos}:1",
            special_tokens=[(eos, tok.token_to_id(eos))])
        tok.decoder = decoders.ByteLevel()
    else:
        raise KeyError(kind)
    for i, s in enumerate(specials):
        assert tok.token_to_id(s) == i, (kind, s, tok.token_to_id(s))
    return tok


def _wrap_tokenizer(kind: str, tok, specials: list[str], max_length: int):
    """The transformers tokenizer around a trained tokenizers.Tokenizer."""
    import transformers

    common = {"tokenizer_object": tok, "model_max_length": max_length}
    if kind == "wordpiece":
        return transformers.PreTrainedTokenizerFast(
            **common, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
            mask_token="[MASK]", model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    if kind in ("bytelevel", "unigram"):
        return transformers.PreTrainedTokenizerFast(
            **common, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
            cls_token="<s>", sep_token="</s>", mask_token="<mask>",
            model_input_names=["input_ids", "attention_mask"])
    # Decoders: right padding, so sentence-transformers' padded batches keep positions 0..n-1.
    if kind == "bytelevel_bos_eos":
        return transformers.PreTrainedTokenizerFast(
            **common, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", padding_side="right",
            model_input_names=["input_ids", "attention_mask"])
    return transformers.PreTrainedTokenizerFast(
        **common, eos_token=specials[0], pad_token=specials[0], padding_side="right",
        model_input_names=["input_ids", "attention_mask"])


def _vocab_size(n_tokens: int) -> int:
    """At least the tokenizer's size, never a multiple of 8."""
    v = n_tokens + 3
    return v + 1 if v % 8 == 0 else v


def build_encoder(name: str, out_dir: str | Path, seed: int = SEED,
                  architecture: str | None = None) -> Path:
    """A transformers checkpoint + tokenizer of ENCODERS[name] in out_dir; architecture
    overrides the class (e.g. "BertForMaskedLM": the encoder under "bert." plus its head)."""
    import torch
    import transformers

    base_architecture, fields, kind, specials = copy.deepcopy(ENCODERS[name])
    architecture = architecture or base_architecture
    tok = _train_tokenizer(kind, specials)
    fields["vocab_size"] = _vocab_size(tok.get_vocab_size())
    if kind == "bytelevel_eos":
        fields.update(bos_token_id=None, eos_token_id=0, pad_token_id=0)
    if kind == "bytelevel_bos_eos":
        fields.update(pad_token_id=0, eos_token_id=1, bos_token_id=2)
    torch.manual_seed(seed)
    config_class = transformers.AutoConfig.for_model(
        {"BertModel": "bert", "RobertaModel": "roberta", "XLMRobertaModel": "xlm-roberta",
         "Qwen3ForCausalLM": "qwen3", "LlamaForCausalLM": "llama",
         "Gemma3TextModel": "gemma3_text"}[base_architecture]).__class__
    config = config_class(**fields)
    config.architectures = [architecture]
    model = getattr(transformers, architecture)._from_config(
        config, attn_implementation="eager", dtype=torch.float32)
    if kind in ("bytelevel_eos", "bytelevel_bos_eos"):  # decoders: as every tiny decoder
        _tiny_models().randomise_(model, seed)
    else:
        randomise_(model, seed)
    model.eval()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    _wrap_tokenizer(kind, tok, specials, fields["max_position_embeddings"]).save_pretrained(out)
    return out



def build_cross_encoder(family: str, out_dir: str | Path, num_labels: int, seed: int = SEED) -> Path:
    """A tiny random *ForSequenceClassification of an encoder family ("bert" or
    "xlm_roberta") with num_labels outputs, and its tokenizer, in out_dir."""
    arch, fields, kind, specials = ENCODERS[family]
    name = f"{family}_ce{num_labels}"
    ENCODERS[name] = (arch, {**fields, "num_labels": num_labels}, kind, specials)
    cls = {"bert": "BertForSequenceClassification",
           "xlm_roberta": "XLMRobertaForSequenceClassification"}[family]
    return build_encoder(name, out_dir, seed=seed, architecture=cls)

def build(pipeline: str, out_dir: str | Path, seed: int = SEED) -> Path:
    """The sentence-transformers snapshot of PIPELINES[pipeline] in out_dir (created)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    spec = PIPELINES[pipeline]
    out = Path(out_dir)
    hf_dir = out.parent / f"{out.name}.hf"
    build_encoder(spec["encoder"], hf_dir, seed)
    transformer = Transformer(str(hf_dir), max_seq_length=spec["max_seq_length"])
    hidden = transformer.get_embedding_dimension()
    pooling = Pooling(hidden, pooling_mode=spec["pooling"],
                      include_prompt=spec.get("include_prompt", True))
    modules = [transformer, pooling]
    dense_specs = spec["dense"] if isinstance(spec["dense"], list) else [spec["dense"]]
    in_features = pooling.get_embedding_dimension()
    for i, dense_spec in enumerate(d for d in dense_specs if d is not None):
        out_features, bias, activation = dense_spec
        dense = Dense(in_features, out_features, bias=bias,
                      activation_function=getattr(torch.nn, activation)())
        randomise_(dense, seed + 1 + i)
        modules.append(dense)
        in_features = out_features
    if spec["normalize"]:
        modules.append(Normalize())
    model = SentenceTransformer(modules=modules, device="cpu", prompts=spec.get("prompts"),
                                default_prompt_name=spec.get("default_prompt_name"))
    model.save(str(out))
    if spec.get("sbert_config"):
        path = out / "sentence_bert_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **spec["sbert_config"]}, indent=2))
    if spec.get("causal_checkpoint"):
        # The CausalLM checkpoint as transformers saved it (model.* names, lm_head), which
        # sentence-transformers loads as the base model.
        for f in ("config.json", "model.safetensors"):
            (out / f).write_bytes((hf_dir / f).read_bytes())
    return out


def load_st(path: str | Path, dtype: str = "float32", attn_implementation: str | None = None):
    """The saved pipeline as users load it: SentenceTransformer(path), fp32 or bf16
    (model_kwargs={"dtype": torch.bfloat16})."""
    import torch
    from sentence_transformers import SentenceTransformer

    model_kwargs: dict[str, Any] = {}
    if dtype != "float32":
        model_kwargs["dtype"] = getattr(torch, dtype)
    if attn_implementation:
        model_kwargs["attn_implementation"] = attn_implementation
    return SentenceTransformer(str(path), device="cpu", model_kwargs=model_kwargs or None)


def load_hf(path: str | Path, dtype: str = "float32"):
    """The transformers base model of a pipeline (AutoModel, eager attention), as
    sentence-transformers' Transformer module runs it."""
    import torch
    import transformers

    model = transformers.AutoModel.from_pretrained(
        path, dtype=getattr(torch, dtype), attn_implementation="eager")
    model.eval()
    return model
