"""API keys as vLLM checks them: a case-insensitive scheme, the key exactly, several keys, $VLLM_API_KEY."""
import pytest

from pagedbench.engines.serving.auth import KeyCheck, api_keys
from pagedbench.serve import ServeConfig


def test_keys_come_from_the_config_and_the_environment():
    assert api_keys(None, {}) == ()
    assert api_keys("a", {}) == ("a",)
    assert api_keys(["a", "b"], {"VLLM_API_KEY": "c"}) == ("a", "b", "c")
    assert api_keys(None, {"VLLM_API_KEY": "c"}) == ("c",)
    assert api_keys("a", {"VLLM_API_KEY": "a"}) == ("a",)
    with pytest.raises(ValueError, match="non-empty string"):
        api_keys(["a", ""], {})


@pytest.mark.parametrize("header, allowed", [
    ("Bearer S3CRET", True), ("bearer S3CRET", True), ("BEARER S3CRET", True), ("Bearer other", True),
    ("Bearer s3cret", False),        # the key's case counts
    ("Bearer S3CRE", False),         # a prefix
    ("Bearer S3CRETS", False),       # extra characters
    ("Bearer  S3CRET", False), ("Bearer S3CRET ", False),   # spaces are characters of the key
    ("Basic S3CRET", False), ("S3CRET", False), ("", False), (None, False),
])
def test_a_header_is_let_in_only_with_one_of_the_keys_exactly(header, allowed):
    assert KeyCheck(("S3CRET", "other")).allows(header) is allowed


def test_without_keys_every_request_is_let_in():
    check = KeyCheck(())
    assert not check.enabled and check.allows(None)


def test_serve_config_takes_one_key_or_a_list():
    assert ServeConfig(api_key=["a", "b"]).api_key == ["a", "b"]
    for bad in ("", [], ["a", ""], 3):
        with pytest.raises(ValueError, match="serve.api_key"):
            ServeConfig(api_key=bad)
