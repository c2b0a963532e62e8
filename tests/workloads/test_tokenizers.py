import pytest

from pagedbench.workloads.tokenizer import load_tokenizer


def test_cl100k_offline():
    tokenizer = load_tokenizer("cl100k_base")
    assert tokenizer.name == "cl100k_base"
    assert tokenizer.encode("hello world") == [15339, 1917]
    assert tokenizer.encode_batch(["hello world", "hello"]) == [[15339, 1917], [15339]]


def test_special_token_text_is_plain_data():
    tokenizer = load_tokenizer("cl100k_base")
    assert len(tokenizer.encode("<|endoftext|>")) > 1


def test_unknown_encoding_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot load bpe_openai encoding 'nope'"):
        load_tokenizer("nope")


def test_missing_hf_directory(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_tokenizer(f"hf:{tmp_path / 'missing'}")


def save_word_tokenizer(folder, vocab: dict[str, int]) -> None:
    """A Hugging Face tokenizer of whole words (`vocab`, with "[UNK]" for the rest) saved to `folder`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]").save_pretrained(folder)


@pytest.mark.slow
def test_hf_tokenizer_from_local_directory(tmp_path):
    """Loading transformers takes a few seconds, hence slow."""
    save_word_tokenizer(tmp_path, {"[UNK]": 0, "hello": 1, "world": 2})
    tokenizer = load_tokenizer(f"hf:{tmp_path}")
    assert tokenizer.name == f"hf:{tmp_path.resolve()}"
    assert tokenizer.encode("hello world zebra") == [1, 2, 0]
    assert tokenizer.encode_batch(["world", "hello hello"]) == [[2], [1, 1]]
    before = tokenizer.fingerprint
    (tmp_path / "added_tokens.json").write_text("{}")
    assert load_tokenizer(f"hf:{tmp_path}").fingerprint != before
