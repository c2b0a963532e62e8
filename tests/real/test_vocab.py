"""Prompt ids outside the model's vocabulary: refused with an error naming the request, or folded by an explicit
choice that the run's summary names and counts, in the executor, the transformers peer and the HTTP client."""
import pytest

from pagedbench.engines.peers.http_client import replay_http
from pagedbench.engines.peers.http_config import HttpBackendConfig
from pagedbench.engines.peers.transformers_config import TransformersBackendConfig
from pagedbench.engines.real.build import RealBackendConfig
from pagedbench.engines.real.vocab import check_choice, first_outside, fit_prompt
from pagedbench.workloads.request import Request

from tests.real.conftest import SPECS, make_model, make_engine
from pagedbench.engines.loop import run_engine


def test_ids_in_the_vocabulary_pass_and_the_first_outside_is_named():
    assert first_outside([0, 5, 10], 11) is None and fit_prompt(3, (0, 5, 10), 11, "error", "k") is None
    assert first_outside([0, 11, 12], 11) == 1 and first_outside([-1], 11) == 0
    assert fit_prompt(3, (0, 11, 23), 11, "wrap", "k") == [0, 0, 1]
    with pytest.raises(ValueError) as err:
        fit_prompt(3, (0, 11, 23), 11, "error", "backend.out_of_vocab")
    assert str(err.value).startswith("request 3: prompt token 1 is id 11, outside the model's vocabulary of 11 ids "
                                     "(0..10);") and "set backend.out_of_vocab=wrap" in str(err.value)
    check_choice("wrap", "k")
    with pytest.raises(ValueError, match=r"k='fold' is not one of \['error', 'wrap'\]"):
        check_choice("fold", "k")


def test_every_config_checks_the_choice_and_folds_by_default():
    assert RealBackendConfig().out_of_vocab == TransformersBackendConfig().out_of_vocab == "wrap"
    for make in (lambda: RealBackendConfig(out_of_vocab="mod"), lambda: TransformersBackendConfig(out_of_vocab="mod")):
        with pytest.raises(ValueError, match="backend.out_of_vocab='mod'"):
            make()
    with pytest.raises(ValueError, match="backend.vocab_size must be >= 1 or null"):
        HttpBackendConfig(url="http://127.0.0.1:1", vocab_size=0)


def outside_trace():
    """Three requests; request 1's prompt holds id 101, one past the test models' vocabulary of 101."""
    return [Request(0, 0.0, (1, 2, 3), 3), Request(1, 0.0, (4, 101, 6), 3), Request(2, 0.0, (7, 8), 3)]


def test_the_executor_stops_on_an_id_outside_the_vocabulary_and_names_the_request():
    model, spec = make_model("opt"), SPECS["opt"]
    scheduler, _, executor = make_engine(model, spec, dict(name="paged", block_size=4), 128)
    executor.out_of_vocab = "error"
    with pytest.raises(ValueError, match=r"request 1: prompt token 1 is id 101, outside the model's vocabulary of 101"):
        run_engine(outside_trace(), scheduler, executor, progress=False)


def test_wrap_folds_the_ids_the_same_as_a_folded_trace_and_counts_the_requests():
    model, spec = make_model("opt"), SPECS["opt"]
    tokens = {}
    for name, trace, choice in (("wrapped", outside_trace(), "wrap"),
                                ("folded", [Request(r.id, 0.0, tuple(t % 101 for t in r.prompt_token_ids), 3)
                                            for r in outside_trace()], "error")):
        scheduler, _, executor = make_engine(model, spec, dict(name="paged", block_size=4), 128)
        executor.out_of_vocab = choice
        record = run_engine(trace, scheduler, executor, progress=False)
        tokens[name] = {s.id: s.output_token_ids for s in record.sequences}
        assert executor.wrapped == ({1} if choice == "wrap" else set())
    assert tokens["wrapped"] == tokens["folded"]


def test_the_http_client_refuses_before_sending_when_told_the_vocabulary():
    cfg = HttpBackendConfig(url="http://127.0.0.1:1", model="m", vocab_size=101)    # nothing listens: nothing sent
    with pytest.raises(ValueError, match=r"request 1: prompt token 1 is id 101, outside the served model's "
                                         r"vocabulary of 101 ids \(backend.vocab_size\)"):
        replay_http(outside_trace(), cfg, progress=False)
