"""The real backend's logits and tokens against the transformers model's own forward pass."""
import pytest
import torch

from pagedbench.engines.sequence import Sequence

from tests.real.conftest import ENGINES, SPECS, make_engine, make_model, requests, serve

LENGTHS = [(5, 6), (9, 4), (3, 7), (12, 5)]


def reference_logits(model, tokens):
    """The library's own forward (sdpa attention, no cache) over a whole sequence."""
    impl = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        with torch.inference_mode():
            return model(input_ids=torch.tensor([tokens])).logits[0].float()
    finally:
        model.set_attn_implementation(impl)


def check_against_library(model, record, captured, atol):
    for seq in record.sequences:
        prompt = list(seq.request.prompt_token_ids)
        assert len(seq.output_token_ids) == seq.request.output_len
        full = prompt + seq.output_token_ids[:-1]
        ref = reference_logits(model, full)
        ours = torch.stack(captured[seq.id])         # one row per generated token
        expected = ref[len(prompt) - 1:]
        assert ours.shape == expected.shape
        torch.testing.assert_close(ours, expected, atol=atol, rtol=atol)
        assert seq.output_token_ids == expected.argmax(-1).tolist()


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_logits_match_the_library_forward_for_prefill_and_decode(arch, engine):
    model, spec = make_model(arch), SPECS[arch]
    captured = {}
    record, _, _ = serve(model, spec, ENGINES[engine], requests(LENGTHS), capacity=512, capture=captured)
    check_against_library(model, record, captured, atol=1e-5)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_triton_kernels_inside_the_model_match_the_library_forward(arch, engine):
    """The Triton write_kv and decode attention kernels (interpreted on a CPU) inside the model's forward."""
    pytest.importorskip("triton", reason="triton is not installed on this platform")
    model, spec = make_model(arch), SPECS[arch]
    captured = {}
    record, _, _ = serve(model, spec, ENGINES[engine], requests(LENGTHS[:3]), capacity=512, capture=captured,
                         ops="triton")
    check_against_library(model, record, captured, atol=1e-4)


def test_three_engines_generate_identical_tokens_including_after_a_preemption(arch):
    model, spec = make_model(arch), SPECS[arch]
    lengths = [(6, 20), (7, 18), (5, 22), (8, 16)]
    outputs = {}
    for engine in ("static", "orca", "paged"):
        # 48 slots: the paged engine (12 blocks of 4) must preempt; the contiguous ones run fewer at once.
        capacity = 48 if engine == "paged" else 128
        record, _, _ = serve(model, spec, ENGINES[engine], requests(lengths, seed=1), capacity=capacity)
        outputs[engine] = {s.id: s.output_token_ids for s in record.sequences}
        if engine == "paged":
            assert sum(s.preemptions for s in record.sequences) > 0
    assert outputs["static"] == outputs["orca"] == outputs["paged"]


def test_paged_kv_gathered_through_block_tables_equals_the_contiguous_copy(arch):
    model, spec = make_model(arch), SPECS[arch]
    gathered = {}
    for engine in ("orca", "paged"):
        scheduler, cache, executor = make_engine(model, spec, ENGINES[engine], capacity=256)
        seqs = [Sequence(r) for r in requests([(9, 30), (13, 30), (2, 30)], seed=2)]
        for seq in seqs:
            scheduler.add(seq, 0.0)
        for _ in range(6):            # a prefill, then decode steps; nobody finishes, so all KV is held
            batch = scheduler.schedule(0.0)
            executor.execute(batch)
            for seq in batch.advancing():
                seq.record_token(0.0)
        # Every token fed so far has its K and V stored: all but the last generated one.
        gathered[engine] = [torch.cat([c.view(-1, *c.shape[-2:])[scheduler.kv.slots(s, 0, s.length - 1)]
                                       for c in cache.k + cache.v]) for s in seqs]
    for paged, contiguous in zip(gathered["paged"], gathered["orca"]):
        torch.testing.assert_close(paged, contiguous, atol=0, rtol=0)
