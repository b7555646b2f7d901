"""hubzoo's Precompiled normalizer (the sentencepiece charsmap) vs HF `tokenizers`.

Real sentencepiece models are trained here (Unigram with nmt_nfkc, nfkc_cf, identity and
custom TSV rules, BPE with byte_fallback) and converted to tokenizer.json by transformers,
so the charsmaps are ones sentencepiece compiles; hubzoo must then match HF on ids, tokens,
offsets and decode, including HF's grapheme-cluster quirks. Corrupt charsmaps must be a
hubzoo.FormatError, never a crash.
"""

from __future__ import annotations

import base64
import importlib
import io
import json
import shutil
import struct
from pathlib import Path

import pytest
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

from test_tokenizer_parity import CORPUS, compare

# Texts whose charsmap entries, grapheme clusters or alignments are unusual.
CHARSMAP_TEXTS = [
    "ＦＵＬＬＷＩＤＴＨ ｌｅｔｔｅｒｓ！ １２３ ｶﾀｶﾅ ｶﾞｷﾞｸﾞ ﾊﾟﾋﾟ",
    "ligatures: ﬁne ﬂow ﬀ ﬃ ﬄ ﬅ ﬆ Ĳ ǆ ǅ ﷺ ﻼ",
    "ligature + combining: ﬁ\u0301 ﬂ\u0308x ﬀ\u0323\u0302",
    "circled ① ② ⑩ ⑳ ⒜ ㈱ ㍻ ㎏ ㎞ ½ ¼ ¾ ² ³ ⁴ ₅ ™ ℃ № Ⅻ ⅻ",
    "combining: e\u0301 A\u0301 a\u030a Z\u0335\u0321 o\u0308\u0304 x\u0301\u0302 \u0301start",
    "decomposed: Cafe\u0301 n\u0303 u\u0308ber A\u030angstro\u0308m \u0915\u093c \u0958",
    "Hangul jamo: \u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af ㄱㅏ ㅎㅏㄴ 한글",
    "spaces: a\u00a0b c\u3000d e\u2009f g\u2002h i\u202fj k\u200bl m\u00adn \ufeffbom",
    "  leading and trailing  \u3000 ",
    "emoji: 👨\u200d👩\u200d👧\u200d👦 🏳️\u200d🌈 1\ufe0f\u20e3 🇯🇵🇫🇷 ⚠\ufe0f 👍🏽 ❤",
    "ZWJ before a pictograph that does not follow one: ½\u200d™ ²\u200d© ¼\u200d☺ 🇯🇵🇫\u0301",
    "controls: \x01a\x1eb\x7fc tab\tvt\x0bff\x0c end",
    "™\x1eg",
    "\x1eleading control",
    "trailing control\x1e",
    "line\r\nbreaks\rand\nmore\r\n\r\n",
    "case: ẞ ß ΣΑΣ ς İ ı Ꭰ ǈ ǋ ﬅ ΐ Ω K Å",
    "quotes “double” ‘single’ – — … ‐ ‑ ′ ″",
    "math 𝐀𝐁𝐂 𝒶𝒷𝒸 𝟘𝟙𝟚 ℌℑℜ ⅈ",
]
# A charsmap compiled by sentencepiece from rules written here, for cases the standard rules
# do not reach: a 2-byte pictograph (so a short cluster can end in a ZWJ), a key spanning
# two clusters (HF never applies it), expansions and deletions next to each other.
CUSTOM_RULES = {"©": "C", "ab": "X", "q": "QQQ", "x": "", "\u0301": "'", "n\u0303": "ñ",
                "Z": "zz", "🇫": "F", "k\u0301": "", "ẋ": "", "w": "ẃ"}
CUSTOM_TEXTS = [
    "©\u200d© ©\u200d🌈 ©\u200d ©\u0301 x©x ©",
    "abc ab a b qxq xq qx xxq Zx xZ",
    "e\u0301 k\u0301 n\u0303 k\u0301k\u0301n\u0303 x\u0301 q\u0301 ẋ\u0301 wẃ",
    "🇫🇷🇫 🇫\u0301 ©🇫",
    "x",
    "xx qq",
]
TEXTS = CORPUS + CHARSMAP_TEXTS + CUSTOM_TEXTS


def training_lines():
    lines = []
    for text in TEXTS:
        lines += [line for line in text.splitlines() if line.strip()]
    return lines * 3 + [line.lower() for line in lines]


def rules_tsv(path: Path, rules: dict) -> Path:
    """sentencepiece's normalization_rule_tsv: source and target as hex code points."""

    def hexes(text):
        return " ".join(f"{ord(c):04X}" for c in text)
    path.write_text("".join(f"{hexes(k)}\t{hexes(v)}\n" for k, v in rules.items()))
    return path


def train_spm(path: Path, **kwargs) -> Path:
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(training_lines()), model_writer=out,
                                   vocab_size=800, hard_vocab_limit=False,
                                   character_coverage=1.0, minloglevel=2, **kwargs)
    path.write_bytes(out.getvalue())
    return path


def normalizer_types(j) -> list:
    if j is None:
        return []
    if j["type"] == "Sequence":
        return [t for n in j["normalizers"] for t in normalizer_types(n)]
    return [j["type"]]


def charsmap_of(tok_json: dict) -> str:
    n = tok_json["normalizer"]
    parts = n["normalizers"] if n["type"] == "Sequence" else [n]
    return next(p["precompiled_charsmap"] for p in parts if p["type"] == "Precompiled")


@pytest.fixture(scope="module")
def spm_tokenizers(tmp_path_factory):
    """name -> tokenizer.json converted by transformers from a sentencepiece model trained here."""
    import transformers
    from tokenizers.models import BPE

    convert = importlib.import_module("transformers.convert_slow_tokenizer")
    d = tmp_path_factory.mktemp("spm")
    out = {}

    def slow_dir(name, model, file):
        sub = d / name
        sub.mkdir()
        shutil.copy(model, sub / file)
        return sub

    # XLM-R style, as transformers builds it from sentencepiece.bpe.model alone.
    nmt = train_spm(d / "nmt.model", model_type="unigram", normalization_rule_name="nmt_nfkc")
    xlmr = transformers.XLMRobertaTokenizer.from_pretrained(
        slow_dir("xlmr", nmt, "sentencepiece.bpe.model"))
    out["xlmr_nmt_nfkc"] = xlmr.backend_tokenizer
    # The slow->fast converter: Sequence[Precompiled, Strip, Replace] and T5 post-processing.
    cf = train_spm(d / "cf.model", model_type="unigram", normalization_rule_name="nfkc_cf")
    t5 = transformers.T5Tokenizer.from_pretrained(slow_dir("t5", cf, "spiece.model"))
    out["t5_nfkc_cf"] = convert.convert_slow_tokenizer(t5)
    xlmr_cf = transformers.XLMRobertaTokenizer.from_pretrained(
        slow_dir("xlmr_cf", cf, "sentencepiece.bpe.model"))
    out["xlmr_nfkc_cf_converted"] = convert.convert_slow_tokenizer(xlmr_cf)
    custom = train_spm(d / "custom.model", model_type="unigram",
                       normalization_rule_tsv=str(rules_tsv(d / "rules.tsv", CUSTOM_RULES)))
    out["xlmr_custom_rules"] = transformers.XLMRobertaTokenizer.from_pretrained(
        slow_dir("xlmr_custom", custom, "sentencepiece.bpe.model")).backend_tokenizer
    # BPE with byte fallback, as transformers builds a tokenizer from a bare sentencepiece proto.
    bpe = train_spm(d / "bpe.model", model_type="bpe", byte_fallback=True,
                    normalization_rule_name="nmt_nfkc")
    ex = convert.SentencePieceExtractor(str(bpe))
    kw = ex.extract(BPE)
    out["bpe_byte_fallback"] = convert.SpmConverter.build_tokenizer_from_spm_proto(
        ex.proto, kw["vocab"], kw["merges"])
    # identity: the charsmap is empty, so no Precompiled normalizer at all.
    ident = train_spm(d / "id.model", model_type="unigram", normalization_rule_name="identity")
    xlmr_id = transformers.XLMRobertaTokenizer.from_pretrained(
        slow_dir("xlmr_id", ident, "sentencepiece.bpe.model"))
    out["xlmr_identity_converted"] = convert.convert_slow_tokenizer(xlmr_id)

    paths = {}
    for name, tok in out.items():
        paths[name] = d / f"{name}.json"
        tok.save(str(paths[name]))
    return paths


@pytest.mark.parametrize("name", ["xlmr_nmt_nfkc", "t5_nfkc_cf", "xlmr_nfkc_cf_converted",
                                  "bpe_byte_fallback", "xlmr_custom_rules"])
def test_precompiled_parity(hz, spm_tokenizers, name):
    path = spm_tokenizers[name]
    j = json.loads(path.read_text())
    assert "Precompiled" in normalizer_types(j["normalizer"])
    blob = base64.b64decode(charsmap_of(j))
    trie_bytes = struct.unpack("<I", blob[:4])[0]
    assert trie_bytes > 0 and len(blob) > 4 + trie_bytes  # a trie and replacement strings
    if name == "bpe_byte_fallback":
        assert j["model"]["type"] == "BPE" and j["model"]["byte_fallback"]
    assert compare(hz, path, TEXTS) == 2 * len(TEXTS)


def test_identity_rule_has_no_precompiled(hz, spm_tokenizers):
    path = spm_tokenizers["xlmr_identity_converted"]
    assert "Precompiled" not in normalizer_types(json.loads(path.read_text())["normalizer"])
    assert compare(hz, path, TEXTS) == 2 * len(TEXTS)


def char_probe(tok_json: dict, tmp_path: Path, name: str) -> Path:
    """The charsmap alone, one token per normalized character: tokens spell the normalized
    text and offsets are the per-character alignments."""
    hf = Tokenizer(models.BPE())
    hf.normalizer = normalizers.Precompiled(base64.b64decode(charsmap_of(tok_json)))
    chars = sorted({c for t in TEXTS for c in hf.normalizer.normalize_str(t)})
    tok = Tokenizer(models.BPE({c: i for i, c in enumerate(["<unk>"] + chars)}, [],
                               unk_token="<unk>"))
    tok.normalizer = hf.normalizer
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    path = tmp_path / f"{name}_probe.json"
    tok.save(str(path))
    return path


@pytest.mark.parametrize("name", ["xlmr_nmt_nfkc", "t5_nfkc_cf", "xlmr_custom_rules"])
def test_charsmap_alignments(hz, spm_tokenizers, tmp_path, name):
    path = char_probe(json.loads(spm_tokenizers[name].read_text()), tmp_path, name)
    assert compare(hz, path, TEXTS) == 2 * len(TEXTS)
    # The texts do exercise the charsmap: many of them change.
    hf = Tokenizer.from_file(str(path))
    changed = [t for t in TEXTS if hf.normalizer.normalize_str(t) != t]
    assert len(changed) >= 15


def test_hf_quirks_are_kept(hz, spm_tokenizers, tmp_path):
    """HF takes the shortest charsmap match for a whole short grapheme cluster and charges
    deletions to the previous edit; spelled out so a regression names the quirk."""
    path = char_probe(json.loads(spm_tokenizers["xlmr_nmt_nfkc"].read_text()), tmp_path, "quirk")
    ours = hz._hubzoo.Tokenizer(str(path))
    hf = Tokenizer.from_file(str(path))
    for text in ["ﬁ\u0301", "™\x1eg", "\x1eg", "ab\x1e", "\r\n", "ｶﾞ", "ﬃ", "A\u030a",
                 "½\u200d™"]:
        e = hf.encode(text)
        ids, tokens, offsets = ours.encode(text, True)
        assert (tokens, [tuple(o) for o in offsets]) == (e.tokens, [tuple(o) for o in e.offsets]), \
            repr(text)
    # the combining acute after the ligature is dropped with it, as HF does
    assert hf.encode("ﬁ\u0301").tokens == ["f", "i"]
    # "½\u200d" is a cluster of its own (GB11 needs a pictograph before the ZWJ), so the ZWJ
    # goes with the ½
    assert hf.encode("½\u200d™").tokens == ["1", "⁄", "2", "T", "M"]


def test_custom_rules_quirks(hz, spm_tokenizers, tmp_path):
    path = char_probe(json.loads(spm_tokenizers["xlmr_custom_rules"].read_text()), tmp_path,
                      "custom")
    hf = Tokenizer.from_file(str(path))
    # "©\u200d©" is one cluster (GB11) of 7 bytes, so it is mapped character by character;
    # "ab" spans two clusters and is never looked up; a deletion after an expansion is
    # charged to the expansion's last character.
    expected = {"©\u200d©": "C\u200dC", "ab": "ab", "qxq": "QQQQQQ", "xq": "QQQ",
                "e\u0301": "e'", "n\u0303": "ñ", "k\u0301k": "k"}
    for text, normalized in expected.items():
        assert hf.normalizer.normalize_str(text) == normalized, repr(text)
    assert compare(hz, path, list(expected)) == 2 * len(expected)


def with_charsmap(tok_json: dict, charsmap, tmp_path: Path, name: str) -> Path:
    j = json.loads(json.dumps(tok_json))
    n = j["normalizer"]
    for p in n["normalizers"] if n["type"] == "Sequence" else [n]:
        if p["type"] == "Precompiled":
            p["precompiled_charsmap"] = charsmap
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(j))
    return path


def test_empty_charsmap_is_identity(hz, spm_tokenizers, tmp_path):
    j = json.loads(spm_tokenizers["t5_nfkc_cf"].read_text())
    ours = hz._hubzoo.Tokenizer(str(with_charsmap(j, "", tmp_path, "empty")))
    j["normalizer"]["normalizers"] = [n for n in j["normalizer"]["normalizers"]
                                      if n["type"] != "Precompiled"]
    ref = tmp_path / "no_precompiled.json"
    ref.write_text(json.dumps(j))
    assert compare(hz, ref, TEXTS) == 2 * len(TEXTS)
    hf = Tokenizer.from_file(str(ref))
    for text in TEXTS:
        e = hf.encode(text)
        ids, tokens, offsets = ours.encode(text, True)
        assert (ids, [tuple(o) for o in offsets]) == (e.ids, [tuple(o) for o in e.offsets])


def u32(*values) -> bytes:
    return b"".join(struct.pack("<I", v) for v in values)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


BAD_CHARSMAPS = {
    "not_base64": ("not base64!", "base64"),
    "bad_length": ("AAAAA", "base64"),
    "bad_padding": ("AA=A", "base64"),
    "nonzero_trailing_bits": ("AB==", "base64"),
    "not_a_string": (None, "base64 string"),
    "shorter_than_trie_size": (b64(b"\x01\x00"), "too short"),
    "trie_size_past_end": (b64(u32(400) + b"\0" * 8), "truncated"),
    "empty_trie": (b64(u32(0) + b"abc\0"), "empty trie"),
    "replacements_not_utf8": (b64(u32(4, 0) + b"\xff\0"), "UTF-8"),
}


@pytest.mark.parametrize("case", BAD_CHARSMAPS, ids=list(BAD_CHARSMAPS))
def test_bad_charsmap_is_format_error(hz, spm_tokenizers, tmp_path, case):
    charsmap, words = BAD_CHARSMAPS[case]
    j = json.loads(spm_tokenizers["xlmr_nmt_nfkc"].read_text())
    path = with_charsmap(j, charsmap, tmp_path, case)
    with pytest.raises(hz.FormatError) as info:
        hz._hubzoo.Tokenizer(str(path))
    message = str(info.value)
    for word in (path.name, "precompiled_charsmap", words):
        assert word in message, f"{word!r} not in {message!r}"


def test_truncated_real_charsmap(hz, spm_tokenizers, tmp_path):
    j = json.loads(spm_tokenizers["xlmr_nmt_nfkc"].read_text())
    blob = base64.b64decode(charsmap_of(j))
    trie_bytes = struct.unpack("<I", blob[:4])[0]
    for cut in (2, 4 + trie_bytes // 2, 4 + trie_bytes - 1):
        path = with_charsmap(j, b64(blob[:cut]), tmp_path, f"cut{cut}")
        with pytest.raises(hz.FormatError, match="precompiled_charsmap"):
            hz._hubzoo.Tokenizer(str(path))


def handmade_trie(leaf_value: int) -> str:
    """A 3-unit trie mapping "a" to the replacement at `leaf_value` of "x\\0". Bytes other
    than '`', 'a', 'b' lead past its end."""
    root = 96 << 10  # offset 96: byte c -> unit 96 ^ c
    a = 97 | 1 << 8 | 3 << 10  # label 'a', has a leaf, offset 3: leaf at unit 1 ^ 3 = 2
    return b64(u32(12, root, a, leaf_value) + b"x\0")


def test_handmade_trie(hz, spm_tokenizers, tmp_path):
    j = json.loads(spm_tokenizers["xlmr_nmt_nfkc"].read_text())
    path = with_charsmap(j, handmade_trie(0), tmp_path, "handmade")
    texts = ["abba`a", "a", "b", "`", "", "\0a\0"]
    assert compare(hz, path, texts) == 2 * len(texts)
    assert Tokenizer.from_file(str(path)).normalizer.normalize_str("abba`a") == "xbbx`x"


def test_corrupt_trie_fails_at_encode(hz, spm_tokenizers, tmp_path):
    """A trie pointing outside itself loads (as in HF) but normalizing through the bad part
    is a FormatError (HF panics); texts that never reach it still encode."""
    j = json.loads(spm_tokenizers["xlmr_nmt_nfkc"].read_text())
    ours = hz._hubzoo.Tokenizer(str(with_charsmap(j, handmade_trie(0), tmp_path, "oob")))
    with pytest.raises(hz.FormatError, match="precompiled_charsmap"):
        ours.encode("abc", False)  # 'c' leads to unit 96 ^ 99 = 3, past the end
    assert ours.encode("", False)[0] == []
    ours.encode("ab\0", False)  # NUL ends a lookup before the trie is read
    # a leaf value past the replacement strings
    ours = hz._hubzoo.Tokenizer(str(with_charsmap(j, handmade_trie(1000), tmp_path, "val")))
    ours.encode("b", False)
    with pytest.raises(hz.FormatError, match="precompiled_charsmap"):
        ours.encode("ba", False)
