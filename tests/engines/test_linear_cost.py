"""The fitted cost model term by term, against sums worked out by hand, and the checks on its preset.

Coefficients are distinct powers of ten, so each term of a total can be read off its digits and a term
charged twice, halved or dropped shows up in the total as well as in `breakdown`.
"""
import dataclasses

import pytest

from pagedbench.engines.sim.linear_cost import LinearCostModel
from pagedbench.engines.specs.presets import load_hardware, load_model

FITTED = {"overhead_s": 1e-1, "per_row_s": 1e-2, "per_token_s": 1e-3, "prefill_pair_s": 1e-5,
          "contiguous_ctx_s": 1e-6, "paged_ctx_s": 1e-7, "paged_block_s": 1e-8, "prefill_iteration_s": 1e-4}


def fitted_model(block_size=None, **changes):
    hw = load_hardware("cpu-tiny")
    fitted = {**FITTED, **changes}
    return LinearCostModel(load_model("tiny"), dataclasses.replace(hw, fitted=fitted), block_size)


# Batch: prefills of 3 and 5 new tokens (the second after 2 cached), decode rows with contexts 7, 10 and 17.
PREFILL, CACHED, DECODE = [3, 5], [0, 2], [7, 10, 17]
# pairs = 3*4 + 5*6 + 2*5*2 = 12 + 30 + 20 = 62; tokens = 8 + 3 = 11; rows = 5; context = 34;
# blocks of 4 read: 2 + 3 + 5 = 10.
BY_HAND = {"overhead": 1e-1, "prefill_iteration": 1e-4, "rows": 5e-2, "tokens": 11e-3,
           "attention_prefill": 62e-5}


def test_breakdown_of_the_contiguous_layout_term_by_term():
    parts = fitted_model().breakdown(PREFILL, DECODE, CACHED)
    assert parts == pytest.approx({**BY_HAND, "attention_decode": 34e-6}, rel=1e-12)
    assert fitted_model().iteration_time(PREFILL, DECODE, CACHED) == pytest.approx(
        sum(BY_HAND.values()) + 34e-6, rel=1e-12)


def test_breakdown_of_the_paged_layout_term_by_term():
    parts = fitted_model(block_size=4).breakdown(PREFILL, DECODE, CACHED)
    assert parts == pytest.approx({**BY_HAND, "attention_decode": 34e-7 + 10e-8}, rel=1e-12)


def test_a_decode_only_batch_pays_no_prefill_terms():
    parts = fitted_model(block_size=4).breakdown([], [7])
    assert parts == pytest.approx({"overhead": 1e-1, "prefill_iteration": 0.0, "rows": 1e-2, "tokens": 1e-3,
                                   "attention_prefill": 0.0, "attention_decode": 7e-7 + 2e-8}, rel=1e-12)


def test_an_empty_batch_has_no_time():
    with pytest.raises(ValueError, match="empty batch"):
        fitted_model().iteration_time([], [])


def test_an_optional_term_a_preset_lacks_is_zero():
    hw = load_hardware("cpu-tiny")
    older = {k: v for k, v in FITTED.items() if k != "prefill_iteration_s"}
    model = LinearCostModel(load_model("tiny"), dataclasses.replace(hw, fitted=older))
    assert model.c["prefill_iteration_s"] == 0.0
    assert model.breakdown([4], [])["prefill_iteration"] == 0.0


@pytest.mark.parametrize("term", ["overhead_s", "paged_block_s"])
def test_a_missing_term_is_named(term):
    hw = load_hardware("cpu-tiny")
    fitted = {k: v for k, v in FITTED.items() if k != term}
    with pytest.raises(ValueError, match=f"lacks \\['{term}'\\]"):
        LinearCostModel(load_model("tiny"), dataclasses.replace(hw, fitted=fitted))


@pytest.mark.parametrize("value", [-1e-9, True, "0.1", None])
def test_a_bad_term_is_named(value):
    with pytest.raises(ValueError, match="per_row_s"):
        fitted_model(per_row_s=value)


def test_a_zero_term_is_allowed():
    assert fitted_model(per_row_s=0).breakdown([], [7])["rows"] == 0.0


def test_a_preset_fitted_for_another_model_is_refused():
    with pytest.raises(ValueError, match="fitted for model 'opt-13b'"):
        fitted_model(model="opt-13b")
    assert fitted_model(model="tiny").c["overhead_s"] == 1e-1


@pytest.mark.parametrize("value", [-0.001, True, "0.002"])
def test_a_bad_scheduler_time_is_refused(value):
    with pytest.raises(ValueError, match="scheduler_s"):
        fitted_model(scheduler_s=value)
