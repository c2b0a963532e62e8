"""The server's tokenizer both ways, without a server: the vocabulary's edges, a character split across tokens
(whole on its last token, replaced when the stream ends inside it), and a Hugging Face tokenizer from a local
directory."""
from __future__ import annotations

import pytest

from pagedbench.engines.serving.token_text import TokenText
from tests.workloads.test_tokenizers import save_word_tokenizer

REPLACEMENT = "\ufffd"


@pytest.fixture(scope="module")
def cl100k():
    return TokenText("cl100k_base")


def split_character(text: TokenText) -> list[int]:
    """The ids of one character that spans several tokens."""
    ids = text.encode("🦜")
    assert len(ids) > 1
    return ids


def test_the_vocabulary_s_first_and_last_ids_have_bytes(cl100k):
    assert cl100k.token_bytes(0) == b"!"
    last = cl100k._vocab - 1
    assert cl100k.token_bytes(last) != b"" and cl100k.token_bytes(last + 1) == b""


def test_a_character_ended_mid_way_is_replaced_when_the_stream_ends(cl100k):
    first, *_ = split_character(cl100k)
    pieces = cl100k.decoder()
    assert pieces.add(first) == ""
    assert pieces.flush() == REPLACEMENT
    assert cl100k.decoder().add(first, final=True) == REPLACEMENT


def test_bytes_that_are_no_character_are_replaced_not_raised(cl100k):
    *_, last = split_character(cl100k)
    pieces = cl100k.decoder()
    assert pieces.add(last, final=True) == REPLACEMENT * len(cl100k.token_bytes(last))


def test_flush_with_nothing_held_back_is_empty(cl100k):
    pieces = cl100k.decoder()
    assert pieces.add(cl100k.encode("ok")[0]) == "ok" and pieces.flush() == ""


def test_a_hugging_face_tokenizer_from_a_local_directory(tmp_path):
    save_word_tokenizer(tmp_path, {"[UNK]": 0, "hello": 1, "world": 2})
    text = TokenText(f"hf:{tmp_path}")
    assert text.encode("hello world") == [1, 2]
    assert [text.token_bytes(i) for i in (-1, 0, 1, 2, 3)] == [b"", b"[UNK]", b"hello", b"world", b""]
    pieces = text.decoder()
    assert pieces.add(1) + pieces.add(2, final=True) == "hello world" == text.decode([1, 2])   # the decoder's space


UNICODE = "héllo wörld 日本語 🙂 naïve café — ok"


@pytest.fixture(scope="module")
def byte_level(tmp_path_factory):
    """A byte-level BPE tokenizer saved to a local directory, as `engines/real/local_model.py` trains one."""
    from pagedbench.engines.real.local_model import train_tokenizer

    folder = tmp_path_factory.mktemp("bpe")
    train_tokenizer(["hello world, a small corpus", "naïve café", "日本語のテキスト"] * 20, 300).save_pretrained(folder)
    return TokenText(f"hf:{folder}")


def streamed(text: TokenText, ids: list[int]) -> str:
    pieces = text.decoder()
    return "".join(pieces.add(t, final=i == len(ids) - 1) for i, t in enumerate(ids)) + pieces.flush()


@pytest.mark.parametrize("which", ["cl100k", "byte_level"])
def test_any_unicode_round_trips_token_by_token_and_at_once(which, request):
    text = request.getfixturevalue(which)
    ids = text.encode(UNICODE)
    assert len(ids) > 8
    assert streamed(text, ids) == UNICODE == text.decode(ids)


@pytest.mark.parametrize("which", ["cl100k", "byte_level"])
def test_random_strings_round_trip(which, request):
    from hypothesis import given, settings, strategies as st

    text = request.getfixturevalue(which)

    @settings(max_examples=60, deadline=None)
    @given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
    def check(s):
        ids = text.encode(s)
        assert streamed(text, ids) == s == text.decode(ids)
    check()


def test_chat_goes_through_the_tokenizer_s_template_where_it_has_one(tmp_path, cl100k):
    from pagedbench.engines.real.local_model import train_tokenizer

    hf = train_tokenizer(["user: hi assistant:"] * 30, 280)
    hf.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    hf.save_pretrained(tmp_path)
    text = TokenText(f"hf:{tmp_path}")
    messages = [{"role": "user", "content": "hi"}]
    assert text.decode(text.chat_ids(messages)) == "<user>hi<assistant>"
    assert cl100k.chat_ids(messages + [{"role": "user", "content": "x"}]) == cl100k.encode("hi\nx")   # no template
