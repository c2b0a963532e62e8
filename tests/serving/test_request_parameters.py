"""The request parameters through the official `openai` client, as a user sends them: the honoured ones change
the output as they should (seeded sampling reproducible, temperature 0 greedy, stop strings and tokens stop,
echo echoes, a list of prompts answered whole, n choices and best_of ranked samples, log-probabilities equal to
an independent forward pass of the model), the refused ones get vLLM's status and name the field."""
import math

import openai
import pytest
import torch

from pagedbench.engines.real.model import build_model
from tests.serving.test_asgi_server import BACKEND, PROMPT, SPEC, loaded, paged, running  # noqa: F401 (fixtures)

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
    (dict(n=0), "n"),
    (dict(n=3, best_of=2), "best_of"),
    (dict(n=1, best_of=2, stream=True), "best_of"),
    (dict(logprobs=21), "logprobs"),
    (dict(logprobs=-1), "logprobs"),
    (dict(logprobs=1, echo=True), "echo"),
    (dict(extra_body={"prompt_logprobs": 1}), "prompt_logprobs"),
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
    (dict(logprobs=True, top_logprobs=21), "top_logprobs"),
    (dict(top_logprobs=2), "top_logprobs"),
])
def test_chat_refuses_structured_output_tools_and_bad_logprobs_by_name(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
                                       **kwargs)
    assert caught.value.body["param"] == param


def test_an_unknown_model_is_vllms_404(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="gpt-4", prompt="Hi", max_tokens=2)
    assert caught.value.body["param"] == "model" and caught.value.body["type"] == "NotFoundError"


# -- n and best_of ---------------------------------------------------------------------------------------------

def test_n_gives_n_choices_each_with_its_index_and_a_seed_reproduces_them_all(client):
    def choices(**kw):
        reply = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, n=3, temperature=1.0,
                                          extra_body={"return_token_ids": True}, **kw)
        assert [c.index for c in reply.choices] == [0, 1, 2]
        assert reply.usage.completion_tokens == 30 and reply.usage.prompt_tokens == len(PROMPT)
        return [c.token_ids for c in reply.choices]

    first = choices(seed=11)
    assert all(len(ids) == 10 for ids in first)
    assert len({tuple(ids) for ids in first}) == 3            # three samples, not one repeated
    assert choices(seed=11) == first                          # the seed reproduces every choice
    assert choices(seed=12) != first
    single = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=1.0, seed=11,
                                       extra_body={"return_token_ids": True})
    assert single.choices[0].token_ids == first[0]            # choice 0 is what n=1 draws


def test_n_at_temperature_zero_gives_n_copies_of_the_greedy_output(client):
    greedy = ids(client, temperature=0)
    reply = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12, n=4, temperature=0,
                                      extra_body={"return_token_ids": True})
    assert [c.token_ids for c in reply.choices] == [greedy] * 4
    two = client.completions.create(model=MODEL, prompt=["Once upon a time", "Hello"], max_tokens=12, n=2,
                                    temperature=0, extra_body={"return_token_ids": True})
    assert [c.index for c in two.choices] == [0, 1, 2, 3]        # prompt p's choice c is p * n + c
    assert two.choices[0].token_ids == two.choices[1].token_ids == greedy != two.choices[2].token_ids
    assert two.usage.completion_tokens == 48


def test_n_streams_chunks_per_choice_index_with_the_usage_of_them_all(client):
    whole = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, n=3, temperature=1.0, seed=3)
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, n=3, temperature=1.0, seed=3,
                                            stream=True, stream_options={"include_usage": True}))
    texts = {0: "", 1: "", 2: ""}
    finishes = {}
    for chunk in chunks:
        for c in chunk.choices:
            texts[c.index] += c.text
            if c.finish_reason is not None:
                finishes[c.index] = c.finish_reason
    assert texts == {c.index: c.text for c in whole.choices}
    assert finishes == {0: "length", 1: "length", 2: "length"}
    assert chunks[-1].usage.completion_tokens == 24 and not chunks[-1].choices


def test_chat_answers_n_choices_and_streams_them_by_index(client):
    messages = [{"role": "user", "content": "Hi"}]
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, n=2, temperature=1.0,
                                           seed=4)
    assert [c.index for c in reply.choices] == [0, 1] and reply.usage.completion_tokens == 12
    streamed = {0: "", 1: ""}
    roles = []
    for chunk in client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, n=2, temperature=1.0,
                                                seed=4, stream=True):
        for c in chunk.choices:
            streamed[c.index] += c.delta.content or ""
            if c.delta.role:
                roles.append(c.index)
    assert streamed == {c.index: c.message.content for c in reply.choices} and sorted(roles) == [0, 1]


def test_best_of_returns_the_n_samples_with_the_highest_summed_logprob(client):
    # best_of=4 draws the very samples n=4 draws with the same seed (row r's noise is seeded by (seed, r, step))
    every = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, n=4, temperature=1.0, seed=21,
                                      logprobs=0)
    total = {c.text: sum(c.logprobs.token_logprobs) for c in every.choices}
    assert len(set(total.values())) == 4
    ranked = sorted(total, key=total.get, reverse=True)
    best = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, n=2, best_of=4, temperature=1.0,
                                     seed=21)
    assert [c.text for c in best.choices] == ranked[:2] and [c.index for c in best.choices] == [0, 1]
    assert all(c.logprobs is None for c in best.choices)        # ranked by logprobs, none asked for
    assert best.usage.completion_tokens == 16                   # the choices returned, as vLLM counts them


# -- log-probabilities -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference(loaded):  # noqa: F811
    """The same seeded model built afresh, with transformers' own attention: an independent forward pass."""
    return build_model(SPEC, torch.device("cpu"), torch.float32, seed=BACKEND.seed)


def forward_logprobs(model, prompt: list[int], output: list[int]) -> torch.Tensor:
    """log_softmax of the model's logits at each output token's position: [len(output), vocab]."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + output])).logits[0].float()
    return torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)


@pytest.mark.parametrize("temperature", [0.0, 1.5])
def test_completions_logprobs_are_the_raw_model_s_from_an_independent_forward_pass(client, reference, temperature):
    reply = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=temperature, seed=2,
                                      logprobs=5, extra_body={"return_token_ids": True})
    choice = reply.choices[0]
    lp, output = choice.logprobs, choice.token_ids
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 10
    expected = forward_logprobs(reference, PROMPT, output)
    chosen = expected.gather(1, torch.tensor(output)[:, None])[:, 0]
    # the raw distribution's (before temperature), as vLLM's default raw_logprobs
    assert lp.token_logprobs == pytest.approx(chosen.tolist(), abs=1e-4)
    top5 = torch.topk(expected, 5, dim=-1).values
    for i, top in enumerate(lp.top_logprobs):
        assert 5 <= len(top) <= 6 or len(set(top)) < 5            # the top 5 and the chosen token (by text)
        assert max(top.values()) == pytest.approx(top5[i, 0].item(), abs=1e-4)
        assert lp.token_logprobs[i] <= 0 and lp.token_logprobs[i] in top.values()
        if temperature == 0:
            assert lp.token_logprobs[i] == max(top.values())      # greedy: the chosen is the most likely
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(10)]
    if temperature > 0:
        assert any(lp.token_logprobs[i] < max(top.values()) for i, top in enumerate(lp.top_logprobs))


def test_completions_logprobs_0_report_the_chosen_token_alone_and_stream_the_same(client):
    whole = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=0)
    lp = whole.choices[0].logprobs
    assert all(len(top) == 1 for top in lp.top_logprobs)
    streamed = [c.choices[0].logprobs for c in client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=0, stream=True) if c.choices]
    assert [x for s in streamed for x in s.token_logprobs] == pytest.approx(lp.token_logprobs, abs=1e-6)
    assert [x for s in streamed for x in s.text_offset] == lp.text_offset
    assert client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, temperature=0).choices[0].logprobs \
        is None


def test_chat_logprobs_give_each_token_its_top_logprobs_from_the_model(client, reference):
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                           temperature=0, logprobs=True, top_logprobs=3,
                                           extra_body={"return_token_ids": True})
    choice = reply.choices[0]
    content = choice.logprobs.content
    assert len(content) == reply.usage.completion_tokens == 8
    prompt = client.post("/../tokenize", body={"messages": [{"role": "user", "content": "Hi"}]},
                         cast_to=object)["tokens"]
    expected = forward_logprobs(reference, prompt, choice.model_extra["token_ids"])
    for i, entry in enumerate(content):
        assert len(entry.top_logprobs) == 3
        values = [t.logprob for t in entry.top_logprobs]
        assert values == sorted(values, reverse=True) and entry.logprob == values[0] <= 0     # greedy: top-1
        assert values == pytest.approx(torch.topk(expected[i], 3).values.tolist(), abs=1e-4)
        assert entry.bytes == list(entry.token.encode()) or "\ufffd" in entry.token
    without = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                             max_tokens=2, temperature=0, logprobs=True)
    assert all(e.top_logprobs == [] and math.isfinite(e.logprob) for e in without.choices[0].logprobs.content)


def test_a_stop_ends_only_the_choice_that_meets_it(client):
    def run(**kw):
        return client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, n=3, temperature=1.0, seed=11,
                                         extra_body={"return_token_ids": True, **kw})
    free = [c.token_ids for c in run().choices]
    stop = free[0][4]
    cut = run(stop_token_ids=[stop])
    for c, ids in zip(cut.choices, free):
        if stop in ids:
            assert c.finish_reason == "stop" and c.token_ids == ids[:ids.index(stop)]
        else:
            assert c.finish_reason == "length" and c.token_ids == ids
    assert sum(stop not in ids for ids in free) >= 1, "every choice met the stop: the test shows nothing"
    assert cut.usage.completion_tokens == sum(len(c.token_ids) for c in cut.choices)
    streamed = {i: [] for i in range(3)}
    finishes = {}
    for chunk in client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, n=3, temperature=1.0, seed=11,
                                           stream=True, extra_body={"return_token_ids": True,
                                                                    "stop_token_ids": [stop]}):
        for c in chunk.choices:
            streamed[c.index] += c.model_extra.get("token_ids") or []
            finishes[c.index] = c.finish_reason or finishes.get(c.index)
    assert streamed == {c.index: c.token_ids for c in cut.choices}
    assert finishes == {c.index: c.finish_reason for c in cut.choices}


@pytest.mark.parametrize("engine", ["static", "orca"])
def test_the_contiguous_engines_answer_n_as_the_paged_one_does(loaded, client, engine):  # noqa: F811
    def choices(port: int, model: str) -> list[list[int]]:
        other = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        reply = other.completions.create(model=model, prompt=PROMPT, max_tokens=6, n=3, temperature=1.0, seed=8,
                                         extra_body={"return_token_ids": True})
        return [c.token_ids for c in reply.choices]
    expected = choices(client.base_url.port, MODEL)
    assert len({tuple(ids) for ids in expected}) == 3
    with running(loaded, engine) as server:
        assert choices(server.port, server.service.model_id) == expected
