"""Figure 19a's sim table and its command; the sim's beam model and the beam check's measures of it; the outside
reference's file (pagedbench.studies.hf_generate)."""
import numpy as np
import pytest

from pagedbench.engines.sim.beam_model import BeamModel, fit_decay
from pagedbench.studies.beam_check import distinct_parents, model_distinct_parents
from pagedbench.studies.swap_cost import main as swap_cost_main, swap_cost_table


def test_swap_cost_is_latency_bound_for_small_blocks_and_recompute_is_flat():
    t = swap_cost_table()
    assert t["swap_one_way_ms"].is_monotonic_decreasing
    assert t["recompute_ms"].nunique() == 1
    assert t["recompute_over_swap"].iloc[0] < 1 < t["recompute_over_swap"].iloc[-1]


def test_swap_cost_command_prints_its_table(capsys):
    assert swap_cost_main(["--hardware", "a100-40gb", "--tokens", "64"]) == 0
    assert "block_size" in capsys.readouterr().out


def test_the_beam_models_decay_is_recovered_by_the_fit():
    for decay in (0.3, 0.7, 1.0):
        model = BeamModel(decay, seed=1)
        ranks = np.array([r for i in range(3000) for r in model.parents(i, 4)])
        assert abs(fit_decay(ranks, 4) - decay) <= 0.06
        assert abs(distinct_parents(ranks, 4) - model_distinct_parents(4, decay)) < 0.1


def test_the_beam_model_draws_the_same_parents_for_a_request_whatever_the_order():
    a, b = BeamModel(0.5, seed=3), BeamModel(0.5, seed=3)
    first = [a.parents(7, 4) for _ in range(5)]
    b.parents(9, 4)                      # another request interleaved does not change request 7's draws
    assert [b.parents(7, 4) for _ in range(5)] == first
    assert all(p == sorted(p) and 0 <= min(p) and max(p) < 4 for p in first)


@pytest.mark.slow
def test_the_beam_check_runs_end_to_end_on_the_real_backend(tmp_path):
    """The whole study, small: the real paged engine through the recording executor, then the sim (it once
    broke when the engine learnt to fast-forward, and only the report's build found it)."""
    from pagedbench.studies.beam_check import main

    assert main(["--out", str(tmp_path), "--widths", "2", "--requests", "4"]) == 0
    table = (tmp_path / "beam_check.csv").read_text().splitlines()
    assert table[0].startswith("beam_width") and len(table) == 2


@pytest.mark.slow
def test_the_outside_reference_writes_its_line_where_the_report_reads_it(tmp_path):
    """transformers `generate` on a few short requests: the JSON line it prints is also OUT/hf_generate.json."""
    import json

    from pagedbench.results.report.backend_sections import HF_RESULT
    from pagedbench.studies.hf_generate import main

    out = main(["--out", str(tmp_path), "workload.num_requests=2", "workload.max_output_len=4"])
    assert json.loads((tmp_path / HF_RESULT).read_text()) == out
    assert out["num_requests"] == 2 and out["output_tokens_per_s"] > 0
