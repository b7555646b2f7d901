"""hubzoo.Tokenizer.from_pretrained(dir) vs transformers.AutoTokenizer where tokenizer.json
disagrees with the class AutoTokenizer picks (tokenizer/tokenizer_class.h): Qwen2Tokenizer's
NFC and split regex, LlamaTokenizer's and GemmaTokenizer's sentencepiece pipelines,
GPT2Tokenizer / RobertaTokenizer / BertTokenizer / XLMRobertaTokenizer / T5Tokenizer rebuilt
from the vocabulary, the model types that send a declared class to TokenizersBackend, and
the added and named special tokens every class adds. Each case is checked to disagree with
tokenizer.json read alone (so it fails on a tokenizer that ignores the class), unless it is a
case where AutoTokenizer keeps the file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from test_tokenizer_parity import CORPUS, MINILM, REPO, SMOLLM2, training_text

QWEN_GGUF = REPO / "models" / "gguf" / "Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf"
SPECIAL_TEXTS = [
    "x<|im_start|>y <|im_start|> z <|endoftext|>w <|fresh|> <|another|> <|brand_new|>",
    "a <tool_call> b<tool_call>c <TOOL_CALL> <s>d</s> <bos>e<eos> [CLS] [SEP] <mask>",
    "a <|img|> b<|img2|>c <|x|> d <|im_end|> e",
]
TEXTS = CORPUS + SPECIAL_TEXTS


def encodings(tok, texts):
    out = []
    for text in texts:
        for add in (True, False):
            out.append(tok.encode(text, add_special_tokens=add).ids)
    return out


def assert_like_autotokenizer(hz, snapshot: Path, cls: str, disagrees: bool = True):
    ref = transformers.AutoTokenizer.from_pretrained(str(snapshot))
    assert type(ref).__name__ == cls  # the class AutoTokenizer picks, as tokenizer_class.cc
    ours = hz.Tokenizer.from_pretrained(snapshot)
    for text in TEXTS:
        for add in (True, False):
            want = ref(text, add_special_tokens=add, return_offsets_mapping=True)
            got = ours.encode(text, add_special_tokens=add)
            where = f"{snapshot.name} text={text[:50]!r} add_special_tokens={add}"
            assert got.ids == want["input_ids"], where
            assert [tuple(o) for o in got.offsets] == [tuple(o) for o in want["offset_mapping"]], where
            for skip in (False, True):
                assert ours.decode(want["input_ids"], skip_special_tokens=skip) == \
                    ref.decode(want["input_ids"], skip_special_tokens=skip), f"{where} skip={skip}"
    # tokenizer.json alone (its padding and truncation off, as transformers calls it) gives
    # other ids: the case tests the class.
    assert (encodings(file_alone(hz, snapshot), TEXTS) != encodings(ours, TEXTS)) == disagrees
    return ref


def file_alone(hz, snapshot: Path):
    tok = json.loads((snapshot / "tokenizer.json").read_text())
    tok["padding"] = tok["truncation"] = None
    path = snapshot.parent / f"{snapshot.name}_alone.json"
    path.write_text(json.dumps(tok))
    return hz.Tokenizer.from_pretrained(path)


def snapshot(out: Path, tokenizer_json: dict, config: dict, model_type: str | None) -> Path:
    out.mkdir()
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    if model_type is not None:
        (out / "config.json").write_text(json.dumps({"model_type": model_type}))
    return out


def from_dir(src: Path, tmp_path: Path, name: str, model_type=None, edit=None, drop=(), **config):
    tok = json.loads((src / "tokenizer.json").read_text())
    if edit:
        edit(tok)
    base = json.loads((src / "tokenizer_config.json").read_text())
    for key in drop:
        base.pop(key, None)
    base.update(config)
    if model_type is None and (src / "config.json").exists():
        model_type = json.loads((src / "config.json").read_text())["model_type"]
    return snapshot(tmp_path / name, tok, base, model_type)


# --- Qwen2Tokenizer on the real Qwen2.5-Coder vocabulary ---------------------------------------

@pytest.fixture(scope="module")
def qwen_files(hz):
    """tokenizer.json (no normalizer) and tokenizer_config.json built from the real GGUF, as
    transformers saves them after loading it (gguf_tokenizer.h)."""
    if not QWEN_GGUF.is_file():
        pytest.fail(f"{QWEN_GGUF} missing: run scripts/prepare_models.py", pytrace=False)
    meta = hz._hubzoo.gguf_info(str(QWEN_GGUF))["metadata"]
    tok_json, cfg_json = hz._hubzoo.gguf_tokenizer_files(meta)
    tok, cfg = json.loads(tok_json), json.loads(cfg_json)
    assert tok["normalizer"] is None
    cfg["tokenizer_class"] = "Qwen2Tokenizer"
    return tok, cfg


def qwen(tmp_path, qwen_files, name, model_type="qwen2", edit=None, drop=(), **config):
    tok, base = json.loads(json.dumps(qwen_files[0])), dict(qwen_files[1])
    if edit:
        edit(tok)
    for key in drop:
        base.pop(key, None)
    base.update(config)
    return snapshot(tmp_path / name, tok, base, model_type)


def test_qwen2_nfc_over_a_file_without_normalizer(hz, tmp_path, qwen_files):
    # The measured case: a combining accent left unnormalised gave 5 more ids.
    d = qwen(tmp_path, qwen_files, "qwen2")
    assert_like_autotokenizer(hz, d, "Qwen2Tokenizer")
    text = "combining: e\u0301 a\u0300\u0301 n\u0303"
    ours = hz.Tokenizer.from_pretrained(d).encode(text).ids
    alone = file_alone(hz, d).encode(text).ids
    assert len(ours) < len(alone)
    # From the GGUF itself transformers keeps its converter's GPT2Tokenizer pipeline (the
    # tokenizer.json it saves has no normalizer), and so does hubzoo.
    assert hz.Tokenizer.from_pretrained(QWEN_GGUF).encode(text).ids == alone


def set_fields(**fields):
    def edit(tok):
        tok.update(fields)
    return edit


def added_flags(tok_json):
    """An added_tokens_decoder whose flags differ from tokenizer.json's, plus tokens it lacks."""
    decoder = {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in tok_json["added_tokens"]}
    for t in decoder.values():
        if t["content"] == "<|im_start|>":
            t["rstrip"] = True
        if t["content"] == "<|endoftext|>":
            t["lstrip"] = True
        if t["content"] == "<tool_call>":
            t.update(normalized=True, special=False, single_word=True)
    decoder["151700"] = {"content": "<|fresh|>", "special": True, "normalized": False}
    return decoder


@pytest.fixture(scope="module")
def tiny_byte_level():
    """A byte-level BPE trained here (no normalizer, GPT-2's ByteLevel split), small enough
    that AutoTokenizer loads it in milliseconds."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    return json.loads(tok.to_str())


QWEN_CONFIG = dict(tokenizer_class="Qwen2Tokenizer", bos_token=None, eos_token="<|im_end|>",
                   pad_token="<|endoftext|>", unk_token=None)
QWEN_CASES = {
    # model_type, tokenizer_config (on QWEN_CONFIG), tokenizer.json fields, class, disagrees
    "qwen2": ("qwen2", {}, {}, "Qwen2Tokenizer", True),
    "qwen3_moe_no_class": ("qwen3_moe", dict(tokenizer_class=None), {}, "Qwen2Tokenizer", True),
    "qwen2_moe_prefix_space": ("qwen2_moe", dict(add_prefix_space=True), {}, "Qwen2Tokenizer", True),
    # qwen2's Hub class is overridden by the registered one; qwen3's is trusted.
    "qwen2_declared_fast": ("qwen2", dict(tokenizer_class="PreTrainedTokenizerFast"), {},
                            "Qwen2Tokenizer", True),
    "qwen3_declared_fast": ("qwen3", dict(tokenizer_class="PreTrainedTokenizerFast"), {},
                            "TokenizersBackend", False),
    "qwen2_file_nfkc_no_decoder": ("qwen2", {}, dict(normalizer={"type": "NFKC"}, decoder=None),
                                   "Qwen2Tokenizer", True),
}


@pytest.mark.parametrize("name", list(QWEN_CASES))
def test_qwen2_variants(hz, tmp_path, tiny_byte_level, name):
    model_type, config, fields, cls, disagrees = QWEN_CASES[name]
    tok = dict(tiny_byte_level, **fields)
    config = {k: v for k, v in dict(QWEN_CONFIG, **config).items()
              if not (k == "tokenizer_class" and v is None)}
    assert_like_autotokenizer(hz, snapshot(tmp_path / name, tok, config, model_type), cls,
                              disagrees)


@pytest.mark.parametrize("model_type,cls", [("qwen2", "Qwen2Tokenizer"),
                                            ("qwen3", "TokenizersBackend")])
def test_added_token_flags_from_config(hz, tmp_path, qwen_files, model_type, cls):
    # Qwen2Tokenizer takes added_tokens_decoder's tokens then re-adds every special token
    # plainly; TokenizersBackend adds the config's on top of the file's.
    d = qwen(tmp_path, qwen_files, f"flags_{model_type}", model_type,
             added_tokens_decoder=added_flags(qwen_files[0]),
             extra_special_tokens=["<|fresh|>", "<|another|>"],
             tokenizer_class="Qwen2Tokenizer" if cls != "TokenizersBackend" else "PreTrainedTokenizerFast")
    ref = assert_like_autotokenizer(hz, d, cls)
    ours = hz.Tokenizer.from_pretrained(d)
    for token in ("<|fresh|>", "<|another|>"):  # not in the vocabulary: new ids, as transformers'
        assert ours.token_to_id(token) == ref.convert_tokens_to_ids(token) > 151643


# --- sentencepiece-style BPE: LlamaTokenizer, GemmaTokenizer ------------------------------------

def sentencepiece_bpe(specials):
    """A Llama-2-style BPE (Metaspace, byte fallback with <0x..> tokens) trained here."""
    tok = Tokenizer(models.BPE(unk_token=specials[0], fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=specials, show_progress=False,
                                  limit_alphabet=150)
    tok.train_from_iterator(training_text(), trainer)
    j = json.loads(tok.to_str())
    base = max(j["model"]["vocab"].values()) + 1
    for b in range(256):
        j["model"]["vocab"][f"<0x{b:02X}>"] = base + b
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    return j


def file_pipeline(kind):
    """tokenizer.json pipelines that disagree with the sentencepiece classes."""
    def edit(tok):
        if kind == "nfkc_metaspace_always":
            tok["normalizer"] = {"type": "NFKC"}
            tok["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                                    "prepend_scheme": "always", "split": True}
        elif kind == "gemma_style":  # what Gemma ships: the space replaced by the normalizer
            tok["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
            tok["pre_tokenizer"] = None
    return edit


LLAMA_SPECIALS = ["<unk>", "<s>", "</s>"]
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
SP_CASES = {
    # specials, model_type, tokenizer_config, file edit, class, disagrees
    "llama": (LLAMA_SPECIALS, "llama", dict(tokenizer_class="LlamaTokenizer"), "nfkc_metaspace_always",
              "LlamaTokenizer", True),
    "llama_legacy": (LLAMA_SPECIALS, "llama", dict(tokenizer_class="LlamaTokenizer", legacy=True),
                     "gemma_style", "LlamaTokenizer", True),
    "llama_no_prefix_space": (LLAMA_SPECIALS, "llama",
                              dict(tokenizer_class="LlamaTokenizer", add_prefix_space=False),
                              "nfkc_metaspace_always", "LlamaTokenizer", True),
    # Mistral and Phi-3 declare LlamaTokenizer; their model types load the file as it is.
    "mistral": (LLAMA_SPECIALS, "mistral", dict(tokenizer_class="LlamaTokenizer"),
                "nfkc_metaspace_always", "TokenizersBackend", False),
    "phi3": (LLAMA_SPECIALS, "phi3", dict(tokenizer_class="LlamaTokenizerFast"),
             "nfkc_metaspace_always", "TokenizersBackend", False),
    "gemma2": (GEMMA_SPECIALS, "gemma2", dict(tokenizer_class="GemmaTokenizer"),
               "nfkc_metaspace_always", "GemmaTokenizer", True),
    "gemma3_text_no_class": (GEMMA_SPECIALS, "gemma3_text", {}, "nfkc_metaspace_always",
                             "GemmaTokenizer", True),
    "gemma4": (GEMMA_SPECIALS, "gemma4", dict(tokenizer_class="GemmaTokenizer"), None,
               "GemmaTokenizer", True),
}


@pytest.mark.parametrize("name", list(SP_CASES))
def test_sentencepiece_classes(hz, tmp_path, name):
    specials, model_type, config, edit, cls, disagrees = SP_CASES[name]
    tok = sentencepiece_bpe(specials)
    if edit:
        file_pipeline(edit)(tok)
    d = snapshot(tmp_path / name, tok, config, model_type)
    assert_like_autotokenizer(hz, d, cls, disagrees)


# --- byte-level BPE and WordPiece: GPT2, RoBERTa, BERT -----------------------------------------

DIGITS_NFC = dict(normalizer={"type": "NFC"}, pre_tokenizer={
    "type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]})
ROBERTA_TOKENS = dict(bos_token="<|im_start|>", eos_token="<|im_end|>", sep_token="<|im_end|>",
                      cls_token="<|im_start|>", unk_token="<|endoftext|>", pad_token="<|endoftext|>",
                      mask_token="<|endoftext|>")
SMOLLM2_CASES = {
    # model_type (None: SmolLM2's llama), tokenizer_config, file edit, class, disagrees
    "gpt2": (None, dict(tokenizer_class="GPT2Tokenizer"), DIGITS_NFC, "GPT2Tokenizer", True),
    "olmo2": ("olmo2", dict(tokenizer_class="GPT2Tokenizer"), DIGITS_NFC, "TokenizersBackend", False),
    "granite": ("granite", dict(tokenizer_class="GPT2Tokenizer"), DIGITS_NFC, "TokenizersBackend",
                False),
    # LlamaTokenizer declared over a byte-level file: AutoTokenizer loads the file.
    "llama3_style": (None, dict(tokenizer_class="LlamaTokenizer"), DIGITS_NFC, "TokenizersBackend",
                     False),
    "qwen2_class": ("qwen2", dict(tokenizer_class="Qwen2Tokenizer"), None, "Qwen2Tokenizer", True),
    "roberta": ("roberta", dict(tokenizer_class="RobertaTokenizer", add_prefix_space=True,
                                **ROBERTA_TOKENS), None, "RobertaTokenizer", True),
    # A named special token tokenizer.json lacks becomes a special added token.
    "new_named_token": (None, dict(bos_token="<|brand_new|>"), None, "TokenizersBackend", True),
    # Other *_token keys are special tokens too (a string, or a serialized AddedToken).
    "model_specific_tokens": (None, dict(image_token="<|img|>", audio_token={
        "content": "<|img2|>", "lstrip": True, "__type": "AddedToken"}), None,
        "TokenizersBackend", True),
    "extra_special_tokens_dict": (None, dict(extra_special_tokens={"image_token": "<|x|>"}), None,
                                  "TokenizersBackend", True),
    # A named token tokenizer.json already has keeps the file's flags, not the config's.
    "named_token_keeps_file_flags": (None, dict(eos_token={
        "content": "<|im_end|>", "lstrip": True, "special": True, "__type": "AddedToken"}), None,
        "TokenizersBackend", False),
}


@pytest.mark.parametrize("name", list(SMOLLM2_CASES))
def test_byte_level_classes(hz, tmp_path, name):
    model_type, config, fields, cls, disagrees = SMOLLM2_CASES[name]
    d = from_dir(SMOLLM2, tmp_path, name, model_type, set_fields(**fields) if fields else None,
                 **config)
    assert_like_autotokenizer(hz, d, cls, disagrees)


def uncased_file(tok):
    tok["normalizer"]["lowercase"] = False


@pytest.mark.parametrize("name,config,cls,disagrees", [
    ("bert_lowercases", {}, "BertTokenizer", True),
    ("bert_cased_strip_accents", dict(do_lower_case=False, strip_accents=True), "BertTokenizer", True),
    ("distilbert", dict(tokenizer_class="DistilBertTokenizerFast"), "DistilBertTokenizer", True),
    ("backend_keeps_file", dict(tokenizer_class="PreTrainedTokenizerFast"), "TokenizersBackend", False),
])
def test_bert(hz, tmp_path, name, config, cls, disagrees):
    # all-MiniLM-L6-v2 with a tokenizer.json that does not lowercase.
    d = from_dir(MINILM, tmp_path, name, "bert", uncased_file, **config)
    assert_like_autotokenizer(hz, d, cls, disagrees)


# --- sentencepiece Unigram and trained byte-level BPE: XLM-R, T5, RoBERTa ------------------------

def trained(kind, specials):
    if kind == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
        tok.decoder = decoders.Metaspace(prepend_scheme="first", split=False)
        trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=specials,
                                          unk_token="<unk>", show_progress=False)
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    return json.loads(tok.to_str())


XLMR_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
T5_SPECIALS = ["<pad>", "</s>", "<unk>"] + [f"<extra_id_{i}>" for i in range(99, -1, -1)]
ENCODER_CASES = {
    # kind, specials, model_type, tokenizer_config, class
    "xlm_roberta": ("unigram", XLMR_SPECIALS, "xlm-roberta",
                    dict(tokenizer_class="XLMRobertaTokenizer"), "XLMRobertaTokenizer"),
    "xlm_roberta_no_prefix": ("unigram", XLMR_SPECIALS, "xlm-roberta",
                              dict(tokenizer_class="XLMRobertaTokenizer", add_prefix_space=False),
                              "XLMRobertaTokenizer"),
    "t5": ("unigram", T5_SPECIALS, "t5", dict(tokenizer_class="T5Tokenizer"), "T5Tokenizer"),
    "t5_three_sentinels": ("unigram", T5_SPECIALS, "t5", dict(tokenizer_class="T5Tokenizer",
                                                              extra_ids=3), "T5Tokenizer"),
    "roberta_trained": ("bpe", XLMR_SPECIALS, "roberta", dict(tokenizer_class="RobertaTokenizer"),
                        "RobertaTokenizer"),
    "roberta_no_trim": ("bpe", XLMR_SPECIALS, "roberta",
                        dict(tokenizer_class="RobertaTokenizer", add_prefix_space=True,
                             trim_offsets=False), "RobertaTokenizer"),
}


@pytest.mark.parametrize("name", list(ENCODER_CASES))
def test_encoder_classes(hz, tmp_path, name):
    kind, specials, model_type, config, cls = ENCODER_CASES[name]
    d = snapshot(tmp_path / name, trained(kind, specials), config, model_type)
    assert_like_autotokenizer(hz, d, cls)


# --- errors and files the class does not fit -----------------------------------------------------

def test_class_over_another_model_keeps_the_file(hz, tmp_path):
    # GPT2Tokenizer declared over a WordPiece file: transformers would build a BPE from the
    # WordPiece vocabulary; hubzoo keeps the file's pipeline instead.
    d = from_dir(MINILM, tmp_path, "gpt2_over_wordpiece", "llama", tokenizer_class="GPT2Tokenizer")
    backend = from_dir(MINILM, tmp_path, "backend", "llama", tokenizer_class="TokenizersBackend")
    assert encodings(hz.Tokenizer.from_pretrained(d), TEXTS) == \
        encodings(hz.Tokenizer.from_pretrained(backend), TEXTS)


@pytest.mark.parametrize("config,fragment", [
    (dict(tokenizer_class="Qwen2Tokenizer", add_prefix_space="yes"), "add_prefix_space"),
    (dict(tokenizer_class="LlamaTokenizer", legacy=1), "legacy"),
    (dict(bos_token=5), "bos_token"),
    (dict(bos_token={"lstrip": True}), "bos_token"),
    (dict(added_tokens_decoder={"x": {"content": "a"}}), "added_tokens_decoder"),
    (dict(added_tokens_decoder=[1]), "added_tokens_decoder"),
    (dict(extra_special_tokens="<a>"), "extra_special_tokens"),
    (dict(tokenizer_class="BertTokenizer", do_lower_case="no"), "do_lower_case"),
])
def test_bad_class_settings(hz, tmp_path, config, fragment):
    model_type = "bert" if config.get("tokenizer_class") == "BertTokenizer" else None
    src = MINILM if model_type else SMOLLM2
    d = from_dir(src, tmp_path, "bad", model_type, **config)
    if config.get("tokenizer_class") in ("Qwen2Tokenizer", "LlamaTokenizer"):
        (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
        if config["tokenizer_class"] == "LlamaTokenizer":  # a sentencepiece file, not byte-level
            (d / "tokenizer.json").write_text(json.dumps(sentencepiece_bpe(LLAMA_SPECIALS)))
    with pytest.raises(hz.FormatError, match=fragment):
        hz.Tokenizer.from_pretrained(d)
