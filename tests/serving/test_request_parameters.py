"""The request parameters through the official `openai` client, as a user sends them: the honoured ones change
the output as they should (seeded sampling reproducible, temperature 0 greedy, stop strings and tokens stop,
echo echoes, a list of prompts answered whole), the refused ones get vLLM's status and name the field."""
import openai
import pytest

from tests.serving.test_asgi_server import loaded, paged  # noqa: F401 (fixtures)

MODEL = "pagedbench-paged-tiny"


@pytest.fixture(scope="module")
def client(paged):  # noqa: F811
    return openai.OpenAI(base_url=f"http://127.0.0.1:{paged.port}/v1", api_key="unused", max_retries=0)


def text(client, **kw) -> str:
    return client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12, **kw).choices[0].text


def ids(client, extra: dict | None = None, **kw) -> list[int]:
    reply = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12,
                                      extra_body={"return_token_ids": True, **(extra or {})}, **kw)
    return reply.choices[0].token_ids


def test_a_seed_reproduces_its_sample_and_another_seed_differs(client):
    first, again = ids(client, temperature=1.0, seed=1), ids(client, temperature=1.0, seed=1)
    assert first == again
    assert ids(client, temperature=1.0, seed=2) != first


def test_temperature_zero_is_greedy_and_sampling_is_not(client):
    greedy = ids(client, temperature=0)
    assert ids(client, temperature=0) == greedy
    assert ids(client, temperature=1.5, seed=5) != greedy
    # top_k=1 keeps only the most likely token: greedy, whatever the temperature
    assert ids(client, {"top_k": 1}, temperature=1.5, seed=5) == greedy


def test_a_stop_string_ends_the_output_before_it_with_finish_reason_stop(client):
    whole = text(client, temperature=0)
    stop = whole[len(whole) // 2: len(whole) // 2 + 2]
    assert stop.strip(), whole
    reply = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=0, stop=stop)
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and choice.text == whole[:whole.index(stop)]
    assert choice.model_extra.get("stop_reason") == stop
    streamed = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=0,
                                         stop=[stop], stream=True)
    chunks = [c for c in streamed if c.choices]
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_a_stop_token_ends_the_output_without_it(client):
    greedy = ids(client, temperature=0)
    reply = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=0,
                                      extra_body={"stop_token_ids": [greedy[3]], "return_token_ids": True})
    choice = reply.choices[0]
    assert choice.finish_reason == "stop" and choice.token_ids == greedy[:greedy.index(greedy[3])]
    assert reply.usage.completion_tokens == len(choice.token_ids)


def test_echo_puts_the_prompt_before_the_output(client):
    assert text(client, temperature=0, echo=True) == "Once upon a time" + text(client, temperature=0)


def test_a_list_of_prompts_is_answered_with_a_choice_each(client):
    reply = client.completions.create(model=MODEL, prompt=["Once upon a time", "Hello"], max_tokens=5, temperature=0)
    assert [c.index for c in reply.choices] == [0, 1]
    assert reply.choices[0].text == text(client, temperature=0)[:len(reply.choices[0].text)]
    assert reply.usage.completion_tokens == 10


def test_completions_without_max_tokens_generate_16(client):
    reply = client.completions.create(model=MODEL, prompt="Hi", temperature=0)
    assert reply.usage.completion_tokens == 16 and reply.choices[0].finish_reason == "length"


@pytest.mark.parametrize("kwargs, param", [
    (dict(n=2), "n"),
    (dict(logprobs=2), "logprobs"),
    (dict(temperature=-1), "temperature"),
    (dict(extra_body={"top_p": 0}), "top_p"),
    (dict(presence_penalty=0.5), "presence_penalty"),
    (dict(suffix="x"), "suffix"),
])
def test_what_cannot_be_honoured_gets_a_400_naming_it(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, **kwargs)
    assert caught.value.status_code == 400 and caught.value.body["param"] == param


@pytest.mark.parametrize("kwargs, param", [
    (dict(response_format={"type": "json_object"}), "response_format"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]), "tools"),
    (dict(logprobs=True, top_logprobs=2), "logprobs"),
])
def test_chat_refuses_structured_output_tools_and_logprobs_by_name(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
                                       **kwargs)
    assert caught.value.body["param"] == param


def test_an_unknown_model_is_vllms_404(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="gpt-4", prompt="Hi", max_tokens=2)
    assert caught.value.body["param"] == "model" and caught.value.body["type"] == "NotFoundError"
