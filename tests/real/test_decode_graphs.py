"""The static decode step (engines/real/graphs.py): row buckets, padded rows that write nowhere, the argmax on
the device, one copy back; the same tokens as the eager step for every engine, run eagerly on a CPU and
captured as CUDA graphs on a GPU."""
import numpy as np
import pytest
import torch

from pagedbench.engines.real.graphs import buckets
from tests.real.conftest import ENGINES, SPECS, make_model, requests, serve
from tests.real.test_sharing_real import PROMPTS, grouped

LENGTHS = [(6, 20), (7, 18), (5, 22), (8, 16), (3, 9)]


def tokens(record):
    return {s.id: (s.output_token_ids, [list(r) for r in s.row_token_ids]) for s in record.sequences}


def test_buckets_are_powers_of_two_up_to_the_first_holding_max_rows():
    assert buckets(1) == [1]
    assert buckets(5) == [1, 2, 4, 8]
    assert buckets(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_static_steps_give_the_eager_tokens_on_every_engine(arch, engine):
    model, spec = make_model(arch), SPECS[arch]
    capacity = 48 if engine == "paged" else 128   # the paged engine preempts (and swaps) at 48 slots
    eager, _, _ = serve(model, spec, ENGINES[engine], requests(LENGTHS, seed=1), capacity=capacity)
    used = []
    static, _, _ = serve(model, spec, ENGINES[engine], requests(LENGTHS, seed=1), capacity=capacity,
                         cuda_graphs=True, executors=used)
    assert tokens(static) == tokens(eager)
    graphs = used[0].graphs
    assert graphs.steps > 0
    if engine != "static":   # its batches keep their rows (finished ones as padding rows): 4 here, a bucket
        assert graphs.padded_rows > 0   # some steps ran 3, 5, 6 or 7 rows, in buckets of 4 and 8
    if engine == "paged":
        assert sum(s.preemptions for s in static.sequences) > 0


@pytest.mark.parametrize("tags", [dict(n=3), dict(beam_width=3)])
def test_parallel_samples_and_beams_run_eagerly_with_the_same_tokens(arch, tags):
    model, spec = make_model(arch), SPECS[arch]
    used = []
    eager, _, _ = serve(model, spec, ENGINES["paged"], grouped(PROMPTS, seed=3, **tags), capacity=256,
                        temperature=0.8 if "n" in tags else 0.0)
    static, _, _ = serve(model, spec, ENGINES["paged"], grouped(PROMPTS, seed=3, **tags), capacity=256,
                         temperature=0.8 if "n" in tags else 0.0, cuda_graphs=True, executors=used)
    assert tokens(static) == tokens(eager)
    assert used[0].graphs.steps == 0


def test_padding_rows_store_nothing_and_a_step_copies_only_its_own_tokens():
    model, spec = make_model("opt"), SPECS["opt"]
    used = []
    serve(model, spec, ENGINES["orca"], requests([(4, 2)], seed=2), capacity=128, cuda_graphs=True, executors=used)
    graphs = used[0].graphs
    before = [t.clone() for t in graphs.cache.k]
    ids = np.array([5, 7, 9], np.int64)
    pos = np.array([3, 3, 3], np.int64)
    lens = np.array([4, 4, 4], np.int64)
    slots = np.array([-1, -1, -1], np.int64)   # rows that store nothing: the cache must not move
    starts = np.array([0, 0, 0], np.int64)
    out = graphs.run(ids, pos, slots, lens, None, starts)
    assert len(out) == 3 and graphs.padded_rows >= 1   # 3 rows in a bucket of 4
    assert all(torch.equal(a, b) for a, b in zip(before, graphs.cache.k))
    assert graphs.lens[3].item() == 1 and graphs.slots[3].item() == -1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graphs_give_the_eager_tokens_on_a_gpu():
    from pagedbench.engines.real.build import RealBackendConfig, build_real, load_real_model
    from pagedbench.engines.config import SchedulerLimits
    from pagedbench.engines.loop import run_engine
    from pagedbench.engines.registry import engine_config
    from pagedbench.engines.specs.presets import load_model
    spec = load_model("tiny")
    limits = SchedulerLimits(max_num_seqs=16)
    outputs = {}
    for graphs in (False, True):
        backend = RealBackendConfig(device="cuda", kv_budget_mib=64, cuda_graphs=graphs)
        setup = build_real(backend, spec, engine_config(dict(name="paged", block_size=16)), limits,
                           loaded=load_real_model(backend, spec))
        setup.executor.warmup()
        record = run_engine(requests([(20, 30), (7, 40), (33, 25)] * 4, seed=4), setup.scheduler, setup.executor,
                            progress=False)
        outputs[graphs] = {s.id: s.output_token_ids for s in record.sequences}
        if graphs:
            assert setup.executor.graphs.graphs and setup.executor.graphs.steps > 0
    assert outputs[True] == outputs[False]
