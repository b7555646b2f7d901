"""hubzoo.Tokenizer from a snapshot vs transformers.AutoTokenizer: tokenizer_config.json
on top of tokenizer.json (padding and truncation off by default, add_bos_token /
add_eos_token ignored as transformers ignores them when tokenizer.json exists,
clean_up_tokenization_spaces), and chat-template ids.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import transformers

REPO = Path(__file__).resolve().parents[2]
CORPUS = json.loads((Path(__file__).parent / "data" / "tokenizer_corpus.json").read_text())
SMOLLM2 = REPO / "models" / "SmolLM2-135M-Instruct"
MINILM = REPO / "models" / "all-MiniLM-L6-v2"
DECODE_EXTRA = ["Hello , world ! Isn 't it ? I 'm sure it 's fine , we 've seen they 're ' ok ' ."]


def assert_like_autotokenizer(hz, snapshot: Path, texts=CORPUS):
    ref = transformers.AutoTokenizer.from_pretrained(str(snapshot))
    ours = hz.Tokenizer.from_pretrained(snapshot)
    for text in texts:
        for add in (True, False):
            ids = ref(text, add_special_tokens=add)["input_ids"]
            where = f"{snapshot.name} text={text[:50]!r} add_special_tokens={add}"
            assert ours.encode(text, add_special_tokens=add).ids == ids, where
            for skip in (False, True):
                assert ours.decode(ids, skip_special_tokens=skip) == \
                    ref.decode(ids, skip_special_tokens=skip), f"{where} skip={skip}"


@pytest.mark.parametrize("snapshot", [SMOLLM2, MINILM], ids=["smollm2", "minilm"])
def test_real_snapshots(hz, snapshot):
    # all-MiniLM-L6-v2's tokenizer.json pads to 128 and truncates; AutoTokenizer does neither.
    assert_like_autotokenizer(hz, snapshot, CORPUS + DECODE_EXTRA)


def variant(tmp_path: Path, source: Path, name: str, **config) -> Path:
    out = tmp_path / name
    out.mkdir()
    shutil.copy(source / "tokenizer.json", out / "tokenizer.json")
    base = json.loads((source / "tokenizer_config.json").read_text())
    base.update(config)
    (out / "tokenizer_config.json").write_text(json.dumps(base))
    return out


CONFIGS = {
    "bos": dict(add_bos_token=True),
    "bos_eos": dict(add_bos_token=True, add_eos_token=True),
    "eos_only_object": dict(add_eos_token=True, add_bos_token=False,
                            eos_token={"content": "<|endoftext|>", "special": True,
                                       "__type": "AddedToken"}),
    "cleanup_ignored_for_bpe": dict(clean_up_tokenization_spaces=True),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_config_variants_bpe(hz, tmp_path, name):
    snapshot = variant(tmp_path, SMOLLM2, name, tokenizer_class="PreTrainedTokenizerFast",
                       **CONFIGS[name])
    assert_like_autotokenizer(hz, snapshot, CORPUS[:24] + DECODE_EXTRA)
    # The file's post-processor stays: no <|im_start|> (id 1) is added.
    assert 1 not in hz.Tokenizer.from_pretrained(snapshot).encode("hi").ids


@pytest.mark.parametrize("cleanup", [True, False])
def test_cleanup_wordpiece(hz, tmp_path, cleanup):
    snapshot = variant(tmp_path, MINILM, f"cleanup_{cleanup}",
                       clean_up_tokenization_spaces=cleanup)
    assert_like_autotokenizer(hz, snapshot, CORPUS[:24] + DECODE_EXTRA)
    text = hz.Tokenizer.from_pretrained(snapshot).decode(
        hz.Tokenizer.from_pretrained(snapshot).encode("it's fine, isn't it?").ids, True)
    assert (text == "it's fine, isn't it?") == cleanup, text


def test_tokenizer_json_file_keeps_hf_tokenizers_semantics(hz):
    # The file itself (not the snapshot) pads to 128 as tokenizers.Tokenizer.from_file does.
    assert len(hz.Tokenizer.from_pretrained(MINILM / "tokenizer.json").encode("hi").ids) == 128
    assert len(hz.Tokenizer.from_pretrained(MINILM).encode("hi").ids) == 3


CONVERSATIONS = [
    [{"role": "user", "content": "Hi there!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "  and ×3 — ok? 😀"}],
]


@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_chat_template_ids(hz, conversation, generation_prompt):
    messages = CONVERSATIONS[conversation]
    ref = transformers.AutoTokenizer.from_pretrained(str(SMOLLM2))
    ids = ref.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    ours = hz.Tokenizer.from_pretrained(SMOLLM2)
    assert ours.apply_chat_template(messages, add_generation_prompt=generation_prompt,
                                    tokenize=True) == list(ids)


@pytest.mark.parametrize("config,fragment", [
    ("{not json", "tokenizer_config.json"),
    ('{"clean_up_tokenization_spaces": "yes"}', "clean_up_tokenization_spaces"),
    ("[1, 2]", "top level"),
])
def test_bad_config(hz, tmp_path, config, fragment):
    out = tmp_path / "bad"
    out.mkdir()
    shutil.copy(SMOLLM2 / "tokenizer.json", out / "tokenizer.json")
    (out / "tokenizer_config.json").write_text(config)
    with pytest.raises(hz.FormatError, match=fragment):
        hz.Tokenizer.from_pretrained(out)
