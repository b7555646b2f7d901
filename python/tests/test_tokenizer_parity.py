"""hubzoo.Tokenizer vs HF `tokenizers`: ids, tokens, character offsets, decode
(with and without skip_special_tokens), batch padding and streaming decode,
over a hard corpus and over tokenizers trained here to cover every component.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)
from tokenizers.decoders import DecodeStream

REPO = Path(__file__).resolve().parents[2]
CORPUS = json.loads((Path(__file__).parent / "data" / "tokenizer_corpus.json").read_text())
SMOLLM2 = REPO / "models" / "SmolLM2-135M-Instruct"
MINILM = REPO / "models" / "all-MiniLM-L6-v2"

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "[CLS]", "[SEP]", "[PAD]",
            "[MASK]", "[UNK]"]


def training_text():
    return CORPUS + [t.lower() for t in CORPUS] + [" ".join(CORPUS)] * 2


def compare(hz, path: Path, texts=CORPUS):
    """Asserts hubzoo matches HF on every text; returns the number of encodings compared."""
    hf = Tokenizer.from_file(str(path))
    ours = hz._hubzoo.Tokenizer(str(path))
    assert ours.vocab_size() == hf.get_vocab_size()
    n = 0
    for text in texts:
        for add in (True, False):
            e = hf.encode(text, add_special_tokens=add)
            ids, tokens, offsets = ours.encode(text, add)
            where = f"{path.name} text={text[:60]!r} add_special_tokens={add}"
            assert ids == e.ids, where
            assert tokens == e.tokens, where
            assert [tuple(o) for o in offsets] == [tuple(o) for o in e.offsets], where
            for skip in (False, True):
                assert ours.decode(e.ids, skip) == hf.decode(e.ids, skip_special_tokens=skip), \
                    f"{where} skip_special_tokens={skip}"
            n += 1
    return n


def save(tok: Tokenizer, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def bpe_byte_level_json():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_text(), trainer)
    return tok.to_str()


@pytest.fixture(scope="module")
def bpe_chars_json():
    tok = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##",
                               end_of_word_suffix="</w>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=SPECIALS, show_progress=False,
                                  continuing_subword_prefix="##", end_of_word_suffix="</w>",
                                  limit_alphabet=120)
    tok.train_from_iterator(training_text(), trainer)
    return tok.to_str()


@pytest.fixture(scope="module")
def wordpiece_json():
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=500, special_tokens=SPECIALS,
                                        show_progress=False, limit_alphabet=150)
    tok.train_from_iterator(training_text(), trainer)
    return tok.to_str()


@pytest.fixture(scope="module")
def unigram_json():
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=SPECIALS, unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    return tok.to_str()


def with_byte_tokens(tok_json: str, byte_fallback: bool, unigram: bool = False) -> str:
    """Adds <0x00>..<0xFF> to the model vocabulary (as Llama-2 / sentencepiece ship them)."""
    j = json.loads(tok_json)
    m = j["model"]
    if unigram:
        m["vocab"] += [[f"<0x{b:02X}>", -20.0] for b in range(256)]
    else:
        base = max(m["vocab"].values()) + 1
        for b in range(256):
            m["vocab"][f"<0x{b:02X}>"] = base + b
    m["byte_fallback"] = byte_fallback
    return json.dumps(j)


# --- real checkpoints -------------------------------------------------------------------------


def test_smollm2_parity(hz):
    assert compare(hz, SMOLLM2 / "tokenizer.json") == 2 * len(CORPUS)


def test_minilm_parity(hz):
    # truncation 128 + fixed padding 128 from tokenizer.json are part of what is compared
    assert compare(hz, MINILM / "tokenizer.json") == 2 * len(CORPUS)


def test_snapshot_dir_and_vocab_lookups(hz):
    hf = Tokenizer.from_file(str(SMOLLM2 / "tokenizer.json"))
    ours = hz._hubzoo.Tokenizer(str(SMOLLM2))
    for token in ["<|im_start|>", "<|endoftext|>", "Hello", "Ġworld", "not-a-token-xyz"]:
        assert ours.token_to_id(token) == hf.token_to_id(token)
    for i in [0, 1, 2, 17, 100, 49151, 49152, 10**6]:
        assert ours.id_to_token(i) == hf.id_to_token(i)


def test_batch_with_padding(hz, tmp_path):
    tok = Tokenizer.from_file(str(SMOLLM2 / "tokenizer.json"))
    tok.enable_padding(pad_id=2, pad_token="<|im_end|>", pad_to_multiple_of=8, direction="left")
    tok.enable_truncation(max_length=40)
    path = save(tok, tmp_path, "smollm2_padded")
    ours = hz._hubzoo.Tokenizer(str(path))
    texts = CORPUS[10:30]
    for add in (True, False):
        expected = tok.encode_batch(texts, add_special_tokens=add)
        got = ours.encode_batch(texts, add)
        assert [g[0] for g in got] == [e.ids for e in expected]
        assert [g[1] for g in got] == [e.tokens for e in expected]
        assert [[tuple(o) for o in g[2]] for g in got] == [[tuple(o) for o in e.offsets] for e in expected]
    assert len({len(g[0]) for g in got}) == 1 and len(got[0][0]) % 8 == 0


@pytest.mark.parametrize("path", [SMOLLM2 / "tokenizer.json", MINILM / "tokenizer.json"],
                         ids=["smollm2", "minilm"])
def test_decode_stream(hz, path):
    hf = Tokenizer.from_file(str(path))
    ours = hz._hubzoo.Tokenizer(str(path))
    for text in CORPUS:
        ids = hf.encode(text).ids
        for skip in (False, True):
            stream = DecodeStream(skip_special_tokens=skip)
            expected = [stream.step(hf, i) for i in ids]
            got = ours.decode_stream(ids, skip)
            assert got == expected, text[:60]
            # never a partial character: every piece is whole text
            assert all(p is None or "\ufffd" not in p or "\ufffd" in text for p in got)


def test_decode_stream_holds_partial_utf8(hz):
    ours = hz._hubzoo.Tokenizer(str(SMOLLM2 / "tokenizer.json"))
    hf = Tokenizer.from_file(str(SMOLLM2 / "tokenizer.json"))
    # "👍" is 4 bytes: byte tokens Ġ-less, one per byte
    ids = [hf.token_to_id(t) for t in ["ðŁ", "ĳ", "į"]]
    assert None not in ids
    pieces = ours.decode_stream(ids, False)
    assert pieces[:-1] == [None] * (len(ids) - 1) and pieces[-1] == "👍"


# --- trained tokenizers: one per model family, components swapped in --------------------------


def test_llama3_style_byte_level_bpe(hz, tmp_path, bpe_byte_level_json):
    for name, pattern in [("llama3", LLAMA3_SPLIT), ("qwen2", QWEN2_SPLIT)]:
        tok = Tokenizer.from_str(bpe_byte_level_json)
        tok.normalizer = normalizers.NFC() if name == "qwen2" else None
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])])
        assert compare(hz, save(tok, tmp_path, name)) == 2 * len(CORPUS)


def test_gpt2_roberta_style(hz, tmp_path, bpe_byte_level_json):
    for add_prefix_space in (True, False):
        tok = Tokenizer.from_str(bpe_byte_level_json)
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
            trim_offsets=True, add_prefix_space=add_prefix_space)
        compare(hz, save(tok, tmp_path, f"roberta_{add_prefix_space}"))
        tok.post_processor = processors.ByteLevel(trim_offsets=True)
        compare(hz, save(tok, tmp_path, f"gpt2_{add_prefix_space}"))


def test_llama2_style_bpe_byte_fallback(hz, tmp_path, bpe_chars_json):
    # sentencepiece-converted BPE: "▁" for spaces, no pre-tokenizer, byte fallback for the rest
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=SPECIALS, show_progress=False,
                                  limit_alphabet=80)
    tok.train_from_iterator(training_text(), trainer)
    tok.pre_tokenizer = None
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    plain = json.loads(tok.to_str())
    for fallback in (True, False):
        path = tmp_path / f"llama2_{fallback}.json"
        path.write_text(with_byte_tokens(json.dumps(plain), fallback))
        compare(hz, path)
    j = json.loads(with_byte_tokens(json.dumps(plain), False))
    j["model"]["fuse_unk"] = False
    path = tmp_path / "llama2_nofuse.json"
    path.write_text(json.dumps(j))
    compare(hz, path)
    j["model"]["ignore_merges"] = True
    path.write_text(json.dumps(j))
    compare(hz, path)


def test_char_bpe_with_prefix_and_suffix(hz, tmp_path, bpe_chars_json):
    tok = Tokenizer.from_str(bpe_chars_json)
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase(),
                                           normalizers.StripAccents()])
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    compare(hz, save(tok, tmp_path, "char_bpe"))
    legacy = json.loads(tok.to_str())
    legacy["model"]["merges"] = [" ".join(m) for m in legacy["model"]["merges"]]
    path = tmp_path / "char_bpe_legacy_merges.json"
    path.write_text(json.dumps(legacy))
    compare(hz, path)


def test_wordpiece_bert_variants(hz, tmp_path, wordpiece_json):
    variants = {
        "bert_accents": (normalizers.BertNormalizer(lowercase=False, strip_accents=True),
                         pre_tokenizers.BertPreTokenizer()),
        "bert_lower_nochinese": (normalizers.BertNormalizer(lowercase=True, handle_chinese_chars=False,
                                                            clean_text=False),
                                 pre_tokenizers.BertPreTokenizer()),
        "ws_digits_punct": (normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase()]),
                            pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                     pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.Punctuation()])),
        "whitespace_nfkc": (normalizers.NFKC(), pre_tokenizers.Whitespace()),
    }
    for name, (norm, pre) in variants.items():
        tok = Tokenizer.from_str(wordpiece_json)
        tok.normalizer, tok.pre_tokenizer = norm, pre
        tok.decoder = decoders.WordPiece(prefix="##", cleanup=name != "whitespace_nfkc")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
        compare(hz, save(tok, tmp_path, name))


def test_unigram_metaspace_variants(hz, tmp_path, unigram_json):
    for scheme in ("always", "first", "never"):
        for split in (True, False):
            tok = Tokenizer.from_str(unigram_json)
            tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme=scheme, split=split)
            tok.decoder = decoders.Metaspace(prepend_scheme=scheme, split=split)
            tok.post_processor = processors.TemplateProcessing(
                single="$A </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
            compare(hz, save(tok, tmp_path, f"unigram_{scheme}_{split}"))
    tok = Tokenizer.from_str(unigram_json)
    tok.normalizer = normalizers.Sequence([normalizers.Strip(), normalizers.Replace(Regex(r" {2,}"), " "),
                                           normalizers.NFKD()])
    tok.decoder = decoders.Sequence([decoders.Metaspace(), decoders.ByteFallback()])
    path = tmp_path / "unigram_byte_fallback.json"
    path.write_text(with_byte_tokens(tok.to_str(), True, unigram=True))
    compare(hz, path)


@pytest.mark.parametrize("behavior", ["removed", "isolated", "merged_with_previous",
                                      "merged_with_next", "contiguous"])
@pytest.mark.parametrize("invert", [False, True])
def test_split_behaviours(hz, tmp_path, bpe_byte_level_json, behavior, invert):
    for k, pattern in enumerate([Regex(r"\s+|\p{N}+"), Regex(r"[\p{P}\p{S}]"), "o", " "]):
        tok = Tokenizer.from_str(bpe_byte_level_json)
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(pattern, behavior=behavior, invert=invert),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        compare(hz, save(tok, tmp_path, f"split_{behavior}_{invert}_{k}"), CORPUS[:40])


def test_normalizer_zoo(hz, tmp_path, bpe_byte_level_json):
    zoo = {
        "nfd": normalizers.NFD(), "nfkd": normalizers.NFKD(), "nfc": normalizers.NFC(),
        "nfkc_lower": normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]),
        "strip_accents": normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()]),
        "strip_left": normalizers.Strip(left=True, right=False),
        "strip_both": normalizers.Strip(),
        "replace_regex": normalizers.Replace(Regex(r"\d+"), "<num>"),
        "prepend": normalizers.Prepend("▁"),
        "byte_level": normalizers.ByteLevel(),
    }
    for name, norm in zoo.items():
        tok = Tokenizer.from_str(bpe_byte_level_json)
        tok.normalizer = norm
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False) if name != "byte_level" else None
        tok.decoder = decoders.ByteLevel()
        compare(hz, save(tok, tmp_path, f"norm_{name}"))


def test_added_token_flags(hz, tmp_path, bpe_byte_level_json):
    tok = Tokenizer.from_str(bpe_byte_level_json)
    tok.normalizer = normalizers.Lowercase()
    tok.decoder = decoders.ByteLevel()
    tok.add_tokens([
        AddedToken("hello", single_word=True),
        AddedToken("World", normalized=True),  # matched after lowercasing
        AddedToken("<mask>", lstrip=True, rstrip=False, special=True, normalized=False),
        AddedToken("<sep>", rstrip=True, special=True, normalized=False),
        AddedToken("<both>", lstrip=True, rstrip=True, normalized=False),
        AddedToken(" spaced ", normalized=False),
        AddedToken("中文", single_word=True, normalized=False),
    ])
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    texts = CORPUS + ["hello hellos ahello hello, Hello HELLO world WORLD", "a <mask> b  <mask>c<mask>",
                      "x<sep>   y <sep>\n\nz", "  <both>  <both><both> ", "a spaced b  spaced  c",
                      "中文 是中文 中文字", "<mask><sep><both>"]
    compare(hz, save(tok, tmp_path, "added_flags"), texts)


def test_no_decoder_and_no_post_processor(hz, tmp_path, wordpiece_json):
    tok = Tokenizer.from_str(wordpiece_json)
    tok.decoder = None
    tok.post_processor = None
    compare(hz, save(tok, tmp_path, "bare"))


# --- bad input ---------------------------------------------------------------------------------


def test_unknown_component_type_is_format_error(hz, tmp_path):
    j = json.loads((SMOLLM2 / "tokenizer.json").read_text())
    j["pre_tokenizer"] = {"type": "NoSuchPreTokenizer"}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(j))
    with pytest.raises(hz._hubzoo.FormatError, match=r"NoSuchPreTokenizer.*|.*bad\.json.*"):
        hz._hubzoo.Tokenizer(str(path))


def test_malformed_json_is_format_error(hz, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"model": {"type": "BPE", "vocab": {')
    with pytest.raises(hz._hubzoo.FormatError, match="broken.json"):
        hz._hubzoo.Tokenizer(str(path))
    with pytest.raises(hz._hubzoo.FileError):
        hz._hubzoo.Tokenizer(str(tmp_path / "missing.json"))
