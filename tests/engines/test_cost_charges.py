"""What the sim executor charges beyond the forward pass, and what a prefill after a cached prefix costs.

Every expected number here is computed in the test from the formulas the
modules document (engines/sim/transfer.py, engines/sim/cost_model.py,
engines/sim/linear_cost.py) and the presets' numbers, not by calling the
function under test on the same arguments:

- a swapped block costs 2 * layers transfers of `host_transfer_latency_s`
  plus block_size * kv_bytes_per_token / tp bytes over `host_link_bandwidth`;
  swaps add to the compute stream (serial) or overlap it layer by layer:
  T_in + max(C + T_out / L, T_out + C / L), one direction's T in the max;
- a device copy of n token slots costs 2 * n * kv_bytes_per_token / tp bytes
  at the effective bandwidth, on the compute stream;
- a prefill of L new tokens after C cached ones has L * (L + 1) / 2 + L * C
  query-key pairs of 4 * head_dim FLOPs per head, and reads the cached K and V
  once: its attention is the full cost over the cached tokens, the same as
  the prefill of all L + C tokens less that of the C cached ones when
  compute-bound.
"""
from __future__ import annotations

import dataclasses

import pytest

from pagedbench.engines.batch import Batch
from pagedbench.engines.build import build_scheduler
from pagedbench.engines.config import PagedEngineConfig, SchedulerLimits
from pagedbench.engines.loop import run_engine
from pagedbench.engines.sim.beam_model import BeamModel
from pagedbench.engines.sim.build import build_cost_model
from pagedbench.engines.sim.cost_model import CostModel
from pagedbench.engines.sim.executor import SimExecutor
from pagedbench.engines.sim.linear_cost import LinearCostModel
from pagedbench.engines.sim.transfer import TransferModel
from pagedbench.engines.specs.presets import load_hardware, load_model
from pagedbench.workloads.request import Request

BLOCK = 16


def hardware(overlap: bool):
    return dataclasses.replace(load_hardware("a100-40gb"), host_transfer_overlap=overlap)


def swap_block_s(model, hw, block_size: int = BLOCK) -> float:
    """One block, one way: a transfer per layer for K and one for V, and the block's bytes over the link."""
    return 2 * model.num_layers * hw.host_transfer_latency_s + \
        block_size * model.kv_bytes_per_token / model.tp / hw.host_link_bandwidth


def copy_s(model, hw, tokens: int) -> float:
    """Read and write `tokens` slots' K and V of every layer at the device's effective bandwidth."""
    return 2 * tokens * model.kv_bytes_per_token / model.tp / (hw.memory_bandwidth * hw.bandwidth_efficiency)


def expected_iteration_s(model, hw, forward_s: float, copy_tokens: int, blocks_out: int, blocks_in: int) -> float:
    compute = forward_s + copy_s(model, hw, copy_tokens)
    t_out, t_in = blocks_out * swap_block_s(model, hw), blocks_in * swap_block_s(model, hw)
    if not hw.host_transfer_overlap:
        return compute + t_out + t_in
    layers = model.num_layers
    if blocks_out:
        return t_in + max(compute + t_out / layers, t_out + compute / layers)
    if blocks_in:
        return max(compute + t_in / layers, t_in + compute / layers)
    return compute


def pairs(n: int) -> list[tuple[int, int]]:
    return [(i, 1000 + i) for i in range(n)]


@pytest.fixture(scope="module")
def opt13b():
    return load_model("opt-13b")


# -- swaps and copies -------------------------------------------------------------------------------------


FORWARDS = {"decode": dict(decode_context_lens=[64, 300]),              # a short step: transfers can dominate
            "prefill": dict(prefill_lens=[1500, 900], decode_context_lens=[100])}   # a long one


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "serial"])
@pytest.mark.parametrize("forward", list(FORWARDS))
@pytest.mark.parametrize("blocks_out, blocks_in, copy_tokens", [
    (0, 1, 0), (0, 3, 0), (0, 100, 0), (5, 0, 0), (100, 0, 0), (4, 2, 0), (60, 80, 0), (2, 7, 32), (0, 0, 48),
    (0, 1, 16)])
def test_an_iteration_is_charged_its_swaps_and_copies(opt13b, overlap, forward, blocks_out, blocks_in, copy_tokens):
    hw = hardware(overlap)
    cost = build_cost_model(opt13b, hw, BLOCK)
    shape = FORWARDS[forward]
    plain = SimExecutor(cost, TransferModel(opt13b, hw, BLOCK)).execute(Batch(**shape))
    assert plain == pytest.approx(cost.iteration_time(shape.get("prefill_lens", []), shape["decode_context_lens"]))
    executor = SimExecutor(cost, TransferModel(opt13b, hw, BLOCK))
    batch = Batch(**shape, swap_out=pairs(blocks_out), swap_in=pairs(blocks_in), copy_tokens=copy_tokens)
    moved = executor.execute(batch)
    assert moved == pytest.approx(expected_iteration_s(opt13b, hw, plain, copy_tokens, blocks_out, blocks_in),
                                  rel=1e-12)
    assert moved > plain
    assert executor.now() == pytest.approx(moved)
    if not overlap:   # serial: exactly the transfers' time on top
        extra = (blocks_out + blocks_in) * swap_block_s(opt13b, hw) + copy_s(opt13b, hw, copy_tokens)
        assert moved - plain == pytest.approx(extra, rel=1e-9)


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "serial"])
def test_swap_ins_cost_as_much_as_swap_outs(opt13b, overlap):
    hw = hardware(overlap)
    cost = build_cost_model(opt13b, hw, BLOCK)
    times = {}
    for way in ("swap_out", "swap_in"):
        batch = Batch(decode_context_lens=[64, 300], **{way: pairs(30)})
        times[way] = SimExecutor(cost, TransferModel(opt13b, hw, BLOCK)).execute(batch)
    assert times["swap_in"] == pytest.approx(times["swap_out"])
    both = SimExecutor(cost, TransferModel(opt13b, hw, BLOCK)).execute(
        Batch(decode_context_lens=[64, 300], swap_out=pairs(30), swap_in=pairs(30)))
    assert both > times["swap_out"] + 0.5 * 30 * swap_block_s(opt13b, hw)


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "serial"])
def test_every_iteration_of_a_swapping_run_is_charged_its_moves(overlap):
    """Beam groups on a tight budget: the scheduler swaps groups out and back and copies blocks on write; each
    iteration's duration is its forward pass plus what its block lists move, by the transfer formula."""
    model, hw = load_model("opt-13b"), hardware(overlap)
    cost = build_cost_model(model, hw, BLOCK)
    charged = []

    class Recording(SimExecutor):
        def execute(self, batch):
            duration = super().execute(batch)
            forward = cost.iteration_time(batch.computed_prefill_lens, batch.decode_context_lens,
                                          batch.prefill_cached)
            charged.append((batch, forward, duration))
            return duration

    scheduler = build_scheduler(PagedEngineConfig(block_size=BLOCK, swap_space=64),
                                SchedulerLimits(max_seq_len=model.max_seq_len), 100 * BLOCK,
                                model.kv_bytes_per_token // model.tp)
    requests = [Request(i, 0.05 * i, tuple(range(40 + 23 * (i % 4))), 60 + 17 * (i % 3), beam_width=4)
                for i in range(10)]
    executor = Recording(cost, TransferModel(model, hw, BLOCK), BeamModel(1.0, 0))
    record = run_engine(requests, scheduler, executor, progress=False)
    assert all(s.generated == s.output_len for s in record.sequences)
    assert sum(len(b.swap_in) for b, _, _ in charged) > 0 and sum(len(b.swap_out) for b, _, _ in charged) > 0
    assert sum(b.copy_tokens for b, _, _ in charged) > 0
    for batch, forward, duration in charged:
        want = expected_iteration_s(model, hw, forward, batch.copy_tokens, len(batch.swap_out), len(batch.swap_in))
        assert duration == pytest.approx(want, rel=1e-12), (len(batch.swap_out), len(batch.swap_in),
                                                            batch.copy_tokens)
    for row, (batch, _, duration) in zip(record.iterations, charged):
        assert row.duration_s == duration and row.swap_blocks == len(batch.swap_out) + len(batch.swap_in)


# -- a prefill after a cached prefix ----------------------------------------------------------------------


def roofline_prefill_attention_s(model, hw, new: list[int], cached: list[int]) -> float:
    """The documented prefill attention term: causal pairs among the new tokens plus new x cached pairs, 4 *
    head_dim FLOPs per pair and query head; Q, K, V read, O written, K and V written per new token, the cached
    K and V read once. Per device: everything divides by tp."""
    q = model.num_heads * model.head_dim
    kv = model.num_kv_heads * model.head_dim
    pair_count = sum(n * (n + 1) // 2 + n * c for n, c in zip(new, cached))
    flops = model.num_layers * 4 * model.head_dim * model.num_heads * pair_count / model.tp
    elements = sum(new) * (2 * q + 4 * kv) + sum(cached) * 2 * kv
    memory = model.num_layers * elements * model.dtype_bytes / model.tp
    return max(flops / (hw.peak_flops * hw.flops_efficiency),
               memory / (hw.memory_bandwidth * hw.bandwidth_efficiency))


@pytest.mark.parametrize("model_name", ["opt-13b", "llama-13b"])
@pytest.mark.parametrize("new, cached", [([60], [340]), ([1500], [1500]), ([1], [2000]), ([700], [0]),
                                         ([30, 50], [80, 341]), ([1200, 8], [900, 16])])
def test_the_roofline_charges_attention_over_the_cached_tokens_at_the_full_cost(model_name, new, cached):
    model, hw = load_model(model_name), load_hardware("a100-40gb")
    cost = CostModel(model, hw, BLOCK)
    want = roofline_prefill_attention_s(model, hw, new, cached)
    assert cost.breakdown(new, [], cached)["attention_prefill"] == pytest.approx(want, rel=1e-9)
    # Only the attention differs from computing the same new tokens with nothing cached.
    extra = want - roofline_prefill_attention_s(model, hw, new, [0] * len(new))
    assert cost.iteration_time(new, [], cached) - cost.iteration_time(new, []) == pytest.approx(extra, rel=1e-6,
                                                                                                 abs=1e-12)
    if any(cached):
        assert extra > 0


@pytest.mark.parametrize("new, cached", [(1500, 1500), (2000, 1200), (1100, 3000)])
def test_a_compute_bound_cached_prefill_costs_the_whole_prefill_less_the_cached_part(opt13b, new, cached):
    """The explicit equivalent: the pairs of L new tokens after C cached ones are those of L + C tokens less
    those of the first C. Lengths long enough that all three prefills are compute-bound."""
    hw = load_hardware("a100-40gb")
    cost = CostModel(opt13b, hw, BLOCK)
    q = opt13b.num_heads * opt13b.head_dim
    per_token_bytes = opt13b.num_layers * 6 * q * opt13b.dtype_bytes        # opt: kv heads == heads
    for n in (new + cached, cached):
        flops_s = opt13b.num_layers * 2 * q * n * (n + 1) / (hw.peak_flops * hw.flops_efficiency)
        assert flops_s > n * per_token_bytes / (hw.memory_bandwidth * hw.bandwidth_efficiency)
    attention = lambda n, c=(): cost.breakdown(n, [], c)["attention_prefill"]   # noqa: E731
    assert attention([new], [cached]) == pytest.approx(attention([new + cached]) - attention([cached]), rel=1e-9)


@pytest.mark.parametrize("new, cached", [(60, 340), (1, 2000), (500, 500), (300, 0)])
def test_the_fitted_model_charges_two_pair_units_per_new_and_cached_token(new, cached):
    model, hw = load_model("tiny"), load_hardware("cpu-tiny")
    cost = build_cost_model(model, hw, BLOCK)
    assert isinstance(cost, LinearCostModel)
    pair_s = hw.fitted["prefill_pair_s"]   # per unit of L * (L + 1), twice the causal pairs
    extra = cost.iteration_time([new], [], [cached]) - cost.iteration_time([new], [])
    assert extra == pytest.approx(pair_s * 2 * new * cached, rel=1e-9, abs=1e-15)
    # The same explicit equivalent as the roofline's, exact for a linear term.
    attention = lambda n, c=(): cost.breakdown(n, [], c)["attention_prefill"]   # noqa: E731
    assert attention([new], [cached]) == pytest.approx(attention([new + cached]) - attention([cached]), rel=1e-9,
                                                       abs=1e-15)


@pytest.mark.parametrize("preset, model_name", [("a100-40gb", "opt-13b"), ("cpu-tiny", "tiny")])
def test_the_executor_charges_a_cached_prefill_for_its_new_tokens_and_the_cached_attention(preset, model_name):
    model, hw = load_model(model_name), load_hardware(preset)
    cost = build_cost_model(model, hw, BLOCK)
    batch = Batch(prefill_lens=[400 + 60, 90], prefill_cached=[400, 0], decode_context_lens=[50])
    duration = SimExecutor(cost, TransferModel(model, hw, BLOCK)).execute(batch)
    assert batch.computed_prefill_lens == [60, 90]
    assert duration == pytest.approx(cost.iteration_time([60, 90], [50], [400, 0]))
    computed_only = cost.iteration_time([60, 90], [50])
    if isinstance(cost, CostModel):
        extra = roofline_prefill_attention_s(model, hw, [60, 90], [400, 0]) - \
            roofline_prefill_attention_s(model, hw, [60, 90], [0, 0])
    else:
        extra = hw.fitted["prefill_pair_s"] * 2 * 60 * 400
    assert duration - computed_only == pytest.approx(extra, rel=1e-6)
    assert duration < cost.iteration_time([460, 90], [50])
