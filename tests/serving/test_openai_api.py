"""The OpenAI wire format without a server: every field `parse_body` reads, at its bounds, and every body a
`Reply` builds, for completions and chat."""
from __future__ import annotations

import json
import re
import time

import pytest

from pagedbench.engines.real.sampling import Sampling
from pagedbench.engines.serving.openai_api import BadRequest, ParsedRequest, Reply, error_body, parse_body
from pagedbench.engines.serving.token_text import TokenText

PROMPT = [5, 6, 7]


@pytest.fixture(scope="module")
def text():
    return TokenText("cl100k_base")


def parse(text, body: dict, chat: bool = False, max_seq_len: int | None = 16) -> ParsedRequest:
    return parse_body(json.dumps(body).encode(), chat, text, max_seq_len)


def refused(text, body, chat: bool = False, max_seq_len: int | None = 16) -> BadRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(BadRequest) as caught:
        parse_body(raw, chat, text, max_seq_len)
    return caught.value


def test_a_request_parsed_with_its_defaults(text):
    vllm_default = Sampling(1.0, 1.0, 0, None)   # vLLM samples at temperature 1 unless told otherwise
    assert parse(text, {"prompt": PROMPT, "max_tokens": 2}) == ParsedRequest(
        False, PROMPT, 2, False, False, False, None, vllm_default, (), (), False, [PROMPT])
    assert parse(text, {"prompt": PROMPT, "max_tokens": 2, "stream": True, "return_token_ids": True,
                        "stream_options": {"include_usage": True}}) == ParsedRequest(
        False, PROMPT, 2, True, True, True, None, vllm_default, (), (), False, [PROMPT])
    assert parse(text, {"prompt": PROMPT, "max_tokens": 2, "stream": None, "stream_options": None}).stream is False


def test_max_tokens_bounds_and_the_chat_s_own_name(text):
    assert parse(text, {"prompt": PROMPT, "max_tokens": 1}).max_tokens == 1
    assert parse(text, {"prompt": PROMPT, "max_tokens": 13}).max_tokens == 13           # 3 + 13 = 16: fits
    assert refused(text, {"prompt": PROMPT, "max_tokens": 14}).code == "context_length_exceeded"
    assert parse(text, {"prompt": PROMPT, "max_tokens": 500}, max_seq_len=None).max_tokens == 500
    for bad in (0, -1, True, 2.0, "2"):
        assert refused(text, {"prompt": PROMPT, "max_tokens": bad}).code == "invalid_request"
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert parse(text, {**chat, "max_tokens": 2, "max_completion_tokens": 3}, chat=True).max_tokens == 3
    assert parse(text, {**chat, "max_tokens": 2, "max_completion_tokens": None}, chat=True).max_tokens == 2
    assert parse(text, {"prompt": PROMPT, "max_tokens": 2, "max_completion_tokens": 3}).max_tokens == 2
    assert refused(text, {**chat, "max_completion_tokens": 0}, chat=True).code == "invalid_request"


def test_without_max_tokens_chat_gets_the_rest_of_the_context_and_completions_16(text):
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert parse(text, chat, chat=True).max_tokens == 15
    assert refused(text, chat, chat=True, max_seq_len=None).code == "missing_max_tokens"
    assert parse(text, {"prompt": PROMPT}, max_seq_len=64).max_tokens == 16       # vLLM's completions default
    assert parse(text, {"prompt": PROMPT}).max_tokens == 13                        # at most the rest of the context
    assert parse(text, {"prompt": PROMPT}, max_seq_len=None).max_tokens == 16
    assert parse(text, {"prompt": [1] * 15}).max_tokens == 1
    assert refused(text, {"prompt": [1] * 16}).code == "context_length_exceeded"


def test_sampling_stops_and_echo_are_read_as_vllm_types_them(text):
    got = parse(text, {"prompt": PROMPT, "max_tokens": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 5, "seed": 7,
                       "stop": "\n", "stop_token_ids": [3, 4], "echo": True})
    assert got.sampling == Sampling(0.5, 0.9, 5, 7) and got.stop == ("\n",) and got.stop_token_ids == (3, 4)
    assert got.echo and parse(text, {"prompt": PROMPT, "max_tokens": 2, "stop": ["a", "b"]}).stop == ("a", "b")
    assert parse(text, {"prompt": PROMPT, "max_tokens": 2, "temperature": 0}).sampling.greedy
    for field, bad in (("temperature", -0.1), ("top_p", 1.5), ("top_k", -2), ("seed", "x"), ("stop", 3),
                       ("stop_token_ids", ["a"]), ("echo", "yes")):
        error = refused(text, {"prompt": PROMPT, "max_tokens": 2, field: bad})
        assert error.param == field and error.code == "invalid_request", field
    for field, value in (("response_format", {"type": "json_schema"}), ("tools", [{}]), ("logit_bias", {"1": 2}),
                         ("frequency_penalty", 1.0), ("suffix", "x"), ("tool_choice", "auto")):
        assert refused(text, {"prompt": PROMPT, "max_tokens": 2, field: value}).param == field, field
    assert parse(text, {"prompt": PROMPT, "max_tokens": 2, "response_format": {"type": "text"},
                        "presence_penalty": 0, "tool_choice": "none"}).max_tokens == 2


def test_log_probabilities_are_read_as_vllm_types_them_up_to_its_max_of_20(text):
    body = {"prompt": PROMPT, "max_tokens": 2}
    assert parse(text, body).logprobs is None and parse(text, body).sampling.logprobs is None
    for k in (0, 5, 20):
        got = parse(text, {**body, "logprobs": k})
        assert got.logprobs == got.sampling.logprobs == k
    for bad in (21, -1, True, 1.5, "2"):
        assert refused(text, {**body, "logprobs": bad}).param == "logprobs", bad
    assert refused(text, {**body, "top_logprobs": 2}).param == "top_logprobs"     # chat's field
    assert refused(text, {**body, "prompt_logprobs": 1}).code == "unsupported_logprobs"
    assert refused(text, {**body, "logprobs": 1, "echo": True}).param == "echo"    # would need the prompt's
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert parse(text, {**chat, "logprobs": True}, chat=True).logprobs == 0
    assert parse(text, {**chat, "logprobs": True, "top_logprobs": 20}, chat=True).logprobs == 20
    assert parse(text, {**chat, "logprobs": False}, chat=True).logprobs is None
    for extra, param in (({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                         ({"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
                         ({"top_logprobs": 2}, "top_logprobs"), ({"logprobs": 2}, "logprobs")):
        assert refused(text, {**chat, **extra}, chat=True).param == param, extra


def test_n_and_best_of_ask_for_parallel_samples(text):
    body = {"prompt": PROMPT, "max_tokens": 2}
    assert parse(text, {**body, "n": 1}) == parse(text, {**body, "n": None}) == parse(text, body)
    got = parse(text, {**body, "n": 3})
    assert (got.n, got.best_of, got.width, got.sampling.logprobs) == (3, 3, 3, None)
    ranked = parse(text, {**body, "n": 2, "best_of": 4})
    # best_of > n ranks by the samples' summed logprob: computed (0 top tokens), though none is reported
    assert (ranked.n, ranked.best_of, ranked.width, ranked.logprobs, ranked.sampling.logprobs) == (2, 4, 4, None, 0)
    assert parse(text, {**body, "best_of": 3}).width == 3
    for bad, param in (({"n": 0}, "n"), ({"n": 3, "best_of": 2}, "best_of"), ({"best_of": 0}, "best_of"),
                       ({"n": 1, "best_of": 2, "stream": True}, "best_of"), ({"n": 2.0}, "n")):
        assert refused(text, {**body, **bad}).param == param, bad
    assert parse(text, {**body, "n": 2, "best_of": 2, "stream": True}).width == 2


def test_flags_and_stream_options_must_be_booleans_and_an_object(text):
    body = {"prompt": PROMPT, "max_tokens": 2}
    for key in ("stream", "return_token_ids"):
        assert refused(text, {**body, key: 1}).code == "invalid_request"
    assert refused(text, {**body, "stream_options": {"include_usage": "yes"}}).code == "invalid_request"
    assert refused(text, {**body, "stream_options": [1]}).code == "invalid_request"


def test_prompts_as_text_ids_or_a_batch_of_one(text):
    hello = text.encode("hello")
    assert parse(text, {"prompt": "hello", "max_tokens": 1}).prompt_ids == hello
    assert parse(text, {"prompt": ["hello"], "max_tokens": 1}).prompt_ids == hello
    assert parse(text, {"prompt": [0], "max_tokens": 1}).prompt_ids == [0]
    assert parse(text, {"prompt": [[4, 5]], "max_tokens": 1}).prompt_ids == [4, 5]
    for bad in ([True], [1, "a"], {"text": "a"}, None, 3, [1.0], [[1], "a", 2]):
        error = refused(text, {"prompt": bad, "max_tokens": 1})
        assert error.code == "invalid_request" and error.param == "prompt", bad
    batch = parse(text, {"prompt": ["hello", [4, 5]], "max_tokens": 1})
    assert batch.batch == [hello, [4, 5]] and batch.prompt_ids == hello
    assert refused(text, {"prompt": "", "max_tokens": 1}).code == "empty_prompt"
    assert refused(text, {"prompt": [], "max_tokens": 1}).code == "empty_prompt"


def test_chat_messages_are_joined_by_lines_from_their_text(text):
    def ids(messages):
        return parse(text, {"messages": messages, "max_tokens": 1}, chat=True, max_seq_len=None).prompt_ids

    assert ids([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]) == \
        text.encode("Be brief.\nHi")
    parts = [{"type": "text", "text": "Hel"}, {"type": "image_url", "image_url": {}}, {"type": "text", "text": "lo"},
             "loose", {"type": "text"}]
    assert ids([{"role": "user", "content": parts}]) == text.encode("Hello")
    assert ids([{"role": "assistant", "content": None}, {"role": "user", "content": "x"}]) == text.encode("\nx")
    for bad in ([], None, "hi", [{"role": "user", "content": "a"}, "b"]):
        assert refused(text, {"messages": bad, "max_tokens": 1}, chat=True).code == "invalid_request"
    error = refused(text, {"messages": [{"role": "user", "content": 3}], "max_tokens": 1}, chat=True)
    assert error.code == "invalid_request" and "int" in str(error)


def test_bodies_that_are_not_json_objects(text):
    assert refused(text, b'{"prompt": [1').code == "invalid_json"
    assert refused(text, b"\xff\xfe").code == "invalid_json"
    assert refused(text, b"[1, 2]").code == "invalid_request"


def test_errors_are_openai_s_body():
    assert BadRequest("no").code == "invalid_request" and str(BadRequest("no", "x")) == "no"
    assert error_body("bad", "some_code") == {"error": {"message": "bad", "type": "invalid_request_error",
                                                        "param": None, "code": "some_code"}}
    assert error_body("down", "c", "server_error")["error"]["type"] == "server_error"


def reply(chat: bool, return_token_ids: bool = False) -> Reply:
    return Reply(ParsedRequest(chat, [1, 2, 3], 4, return_token_ids=return_token_ids), "m")


def head(body: dict, chat: bool, whole: bool = False) -> dict:
    kind = ("chat.completion" if whole else "chat.completion.chunk") if chat else "text_completion"
    return {"object": kind, "model": "m"}


@pytest.mark.parametrize("chat", [False, True])
def test_a_reply_s_id_time_and_usage(chat):
    before = int(time.time())
    r = reply(chat)
    assert re.fullmatch(("chatcmpl" if chat else "cmpl") + "-[0-9a-f]{32}", r.id)
    assert before <= r.created <= int(time.time()) and r.id != reply(chat).id
    assert r.usage(4) == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    usage = r.usage_chunk(2)
    assert usage == {"id": r.id, "created": r.created, **head(usage, chat), "choices": [],
                     "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


@pytest.mark.parametrize("chat", [False, True])
def test_a_reply_s_chunks(chat):
    r = reply(chat)
    frame = {"id": r.id, "created": r.created, **head({}, chat)}
    said = {"delta": {"content": "a"}} if chat else {"text": "a"}
    assert r.chunk(9, "a", False) == {**frame, "choices": [{"index": 0, **said, "finish_reason": None}]}
    assert r.chunk(9, "a", True) == {**frame, "choices": [{"index": 0, **said, "finish_reason": "length"}]}
    assert reply(chat, True).chunk(9, "a", True)["choices"][0]["token_ids"] == [9]
    closing = r.closing_chunk("z")
    held = {"delta": {"content": "z"}} if chat else {"text": "z"}
    assert closing == {**frame, "choices": [{"index": 0, "finish_reason": "length", **held}]}
    nothing = {"delta": {}} if chat else {"text": ""}
    assert r.closing_chunk("")["choices"] == [{"index": 0, "finish_reason": "length", **nothing}]
    assert r.role_chunk() == {**frame, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                    "finish_reason": None}]}


@pytest.mark.parametrize("chat", [False, True])
def test_a_whole_reply(chat):
    r = reply(chat)
    said = {"message": {"role": "assistant", "content": "ab"}} if chat else {"text": "ab", "logprobs": None}
    assert r.whole([4, 5], "ab") == {"id": r.id, "created": r.created, **head({}, chat, whole=True),
                                     "choices": [{"index": 0, "finish_reason": "length", **said}],
                                     "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    assert reply(chat, True).whole([4, 5], "ab")["choices"][0]["token_ids"] == [4, 5]
    assert "token_ids" not in r.whole([4], "a")["choices"][0]


def test_a_token_id_outside_the_model_s_vocabulary_is_refused_by_name_never_folded(text):
    body = json.dumps({"prompt": [0, 9, 10, 3], "max_tokens": 2}).encode()
    assert parse_body(body, False, text, 16, vocab_size=11).prompt_ids == [0, 9, 10, 3]   # 10 is the last id
    with pytest.raises(BadRequest) as caught:
        parse_body(json.dumps({"prompt": [0, 9, 11, 3], "max_tokens": 2}).encode(), False, text, 16, vocab_size=11)
    assert caught.value.code == "invalid_token_id"
    assert str(caught.value) == "prompt token 2 is id 11, outside the model's vocabulary of 11 ids (0..10)"
    assert parse_body(json.dumps({"prompt": [10**6], "max_tokens": 2}).encode(), False, text, 16).prompt_ids == [10**6]
