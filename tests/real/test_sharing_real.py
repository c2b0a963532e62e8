"""Sharing and swapping on the real backend: every engine generates the same tokens for parallel samples,
beams and shared prefixes, the paged engine's shared and swapped blocks included; a swap moves K and V
bit for bit."""
import torch

from pagedbench.engines.real.swap import swap_blocks
from tests.real.conftest import ENGINES, SPECS, make_model, requests, serve
from pagedbench.workloads.request import Request

PROMPTS = [(6, 12), (9, 10), (5, 14), (7, 9)]


def grouped(lengths, seed, **tags):
    return [Request(r.id, r.arrival_s, r.prompt_token_ids, r.output_len, **tags) for r in requests(lengths, seed)]


def reference_beams(model, prompt, width, steps):
    """Beam search by full forward passes of the library's model (no KV cache): the ground truth."""
    beams, scores = [[]], torch.zeros(1)
    impl = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        for _ in range(steps):
            batch = torch.tensor([list(prompt) + b for b in beams])
            with torch.inference_mode():
                logits = model(input_ids=batch, use_cache=False).logits[:, -1].float()
            total = (torch.log_softmax(logits, -1) + scores[:, None]).flatten()
            scores, index = torch.topk(total, width)
            vocab = logits.shape[-1]
            beams = [beams[i // vocab] + [i % vocab] for i in index.tolist()]
    finally:
        model.set_attn_implementation(impl)
    return beams


def test_beam_search_gives_the_same_beams_on_every_engine_and_matches_a_full_recompute(arch):
    model, spec = make_model(arch), SPECS[arch]
    reqs = grouped(PROMPTS, seed=3, beam_width=3)
    outputs = {}
    for engine in ("static", "orca", "paged"):
        # 60 slots: 15 blocks of 4 for the paged engine, which must swap groups out to fit.
        capacity = 60 if engine == "paged" else 512
        record, _, _ = serve(model, spec, ENGINES[engine], reqs, capacity=capacity)
        outputs[engine] = {s.id: s.row_token_ids for s in record.sequences}
        if engine == "paged":
            assert sum(s.swaps for s in record.sequences) > 0
    assert outputs["static"] == outputs["orca"] == outputs["paged"]
    for r in reqs[:2]:
        assert outputs["paged"][r.id] == reference_beams(model, r.prompt_token_ids, 3, r.output_len)


def test_parallel_samples_are_the_same_on_every_engine_and_differ_between_rows(arch):
    model, spec = make_model(arch), SPECS[arch]
    reqs = grouped(PROMPTS, seed=4, n=4)
    outputs = {}
    for engine in ("static", "orca", "paged"):
        # 96 slots: 24 blocks of 4 for the paged engine, which must swap groups out to fit.
        capacity = 96 if engine == "paged" else 512
        record, _, _ = serve(model, spec, ENGINES[engine], reqs, capacity=capacity, temperature=1.0)
        outputs[engine] = {s.id: s.row_token_ids for s in record.sequences}
        for seq in record.sequences:
            assert all(len(row) == seq.output_len for row in seq.row_token_ids)
        if engine == "paged":
            assert sum(s.swaps for s in record.sequences) > 0
    assert outputs["static"] == outputs["orca"] == outputs["paged"]
    assert any(len({tuple(r) for r in rows}) > 1 for rows in outputs["paged"].values())


def test_a_shared_prefix_is_prefilled_once_and_the_tokens_do_not_change(arch):
    model, spec = make_model(arch), SPECS[arch]
    prefix = tuple(range(20, 31))          # 11 tokens: two full blocks of 4 are cached, the rest recomputed
    base = requests([(5, 8), (7, 6), (4, 9), (6, 7)], seed=5)
    reqs = [Request(r.id, 0.01 * r.id, prefix + r.prompt_token_ids, r.output_len, prefix_id=0,
                    prefix_len=len(prefix)) for r in base]
    outputs, cached = {}, []
    for engine in ("orca", "paged"):
        record, scheduler, _ = serve(model, spec, ENGINES[engine], reqs, capacity=256)
        outputs[engine] = {s.id: s.output_token_ids for s in record.sequences}
        if engine == "paged":
            cached = scheduler.kv.prefix_blocks.get(0, [])
    assert len(cached) == 2
    assert outputs["orca"] == outputs["paged"]


def test_swap_by_preemption_keeps_tokens_identical():
    model, spec = make_model("llama"), SPECS["llama"]
    lengths = [(6, 20), (7, 18), (5, 22), (8, 16)]
    swapping = dict(ENGINES["paged"], preemption="swap")
    outputs = {}
    for name, engine, capacity in (("orca", ENGINES["orca"], 128), ("paged", swapping, 48)):
        record, _, _ = serve(model, spec, engine, requests(lengths, seed=1), capacity=capacity)
        outputs[name] = {s.id: s.output_token_ids for s in record.sequences}
        if name == "paged":
            assert sum(s.swaps for s in record.sequences) > 0
    assert outputs["orca"] == outputs["paged"]


def test_swap_out_and_back_in_moves_k_and_v_bit_for_bit():
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):
        device_k = [torch.randn(8, 4, 2, 16, generator=gen).to(dtype) for _ in range(3)]
        device_v = [torch.randn(8, 4, 2, 16, generator=gen).to(dtype) for _ in range(3)]
        before_k = [t.clone() for t in device_k]
        before_v = [t.clone() for t in device_v]
        host_k = [torch.empty(5, 4, 2, 16, dtype=dtype) for _ in range(3)]
        host_v = [torch.empty(5, 4, 2, 16, dtype=dtype) for _ in range(3)]
        out = [(1, 0), (6, 3), (2, 4)]
        swap_blocks(device_k, device_v, host_k, host_v, out)
        for t in device_k + device_v:
            t.zero_()
        back = [(0, 7), (3, 0), (4, 5)]        # each block comes back to a different device block
        swap_blocks(host_k, host_v, device_k, device_v, back)
        for (src, _), (_, dst) in zip(out, back):
            for layer in range(3):
                assert torch.equal(device_k[layer][dst], before_k[layer][src])
                assert torch.equal(device_v[layer][dst], before_v[layer][src])
