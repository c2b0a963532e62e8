"""The report's section on the real backend's CPU runs, with the outside reference beside our static engine."""
from __future__ import annotations

import json
from pathlib import Path

from pagedbench.results.report.backend_sections import HF_RESULT, section_real


def summary(folder: Path, engine: str, tok_s: float, requests: int = 24) -> None:
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({
        "engine": engine, "output_tokens_per_s": tok_s, "mean_batch_size": 3.0, "mem_token_states": 0.5,
        "mem_waiting_token_states": 0.4, "wall_s": 10.0, "num_requests": requests, "kv_budget_slots": 8192,
        "kv_budget_bytes": 64 * 2 ** 20}))


def test_the_real_section_sets_our_static_engine_beside_transformers_generate_from_their_records(tmp_path):
    for engine, tok_s in (("static", 100.0), ("orca-max", 150.0), ("paged", 300.0)):
        summary(tmp_path / "real_cpu" / engine, engine, tok_s, 100)
    hf = tmp_path / "hf_generate"
    section = section_real(tmp_path / "real_cpu", tmp_path / "static_reference", hf)
    assert section.has_runs and [n.part for n in section.not_run] == [
        "The real backend on this machine's CPU: our static engine beside transformers generate",
        "The real backend on this machine's CPU: transformers generate, the outside reference"]
    assert "paged / static output tokens/s: 3.00x" in section.text and "outside reference" not in section.text
    summary(tmp_path / "static_reference" / "engine=static", "static", 239.3)
    hf.mkdir()
    (hf / HF_RESULT).write_text(json.dumps({"num_requests": 24, "batch_size": 4, "output_tokens_per_s": 185.9}))
    section = section_real(tmp_path / "real_cpu", tmp_path / "static_reference", hf)
    assert not section.not_run
    assert "on the first 24 requests of the same trace" in section.text
    assert "| transformers `generate`, static batches of 4, left-padded, EOS ignored | 185.9 |" in section.text
    assert "| 239.3 | `python run.py -m engine=static workload.num_requests=24` |" in section.text
    assert "records do not match" not in section.text
    summary(tmp_path / "static_reference" / "engine=static,x", "static", 239.3, requests=12)
    (tmp_path / "static_reference" / "engine=static" / "summary.json").unlink()
    assert "records do not match" in section_real(tmp_path / "real_cpu", tmp_path / "static_reference", hf).text


def run_in_round(folder: Path, engine: str, tok_s: float, round_: int) -> None:
    summary(folder, engine, tok_s, 100)
    (folder / "run.json").write_text(json.dumps({"config": {"round": round_}}))


def test_rounds_give_each_figure_its_spread_and_the_ratios_paired_by_round(tmp_path):
    """Each engine once per round: every figure a mean (min-max), and paged over each baseline paired round by
    round, not a ratio of means."""
    speeds = {"static": (100.0, 200.0, 150.0), "orca-max": (150.0, 300.0, 150.0), "paged": (300.0, 500.0, 600.0)}
    for engine, by_round in speeds.items():
        for r, tok_s in enumerate(by_round):
            run_in_round(tmp_path / "real_cpu" / f"+round={r},engine={engine}", engine, tok_s, r)
    text = section_real(tmp_path / "real_cpu").text
    assert "3 rounds, each running every engine once" in text
    assert "| static | 150.0 (100.0-200.0) | 3.00 | 50.0 | 40.0 | 10 |" in text
    assert "| paged | 466.7 (300.0-600.0) | 3.00 | 50.0 | 40.0 | 10 |" in text
    # by round 3.00, 2.50, 4.00: mean 3.17 (a ratio of the means would read 3.11)
    assert "paged / static output tokens/s: 3.17x (2.50-4.00), paired by round (3.00x, 2.50x, 4.00x)" in text
    assert "paged / orca-max output tokens/s: 2.56x (1.67-4.00), paired by round (2.00x, 1.67x, 4.00x)" in text


def test_a_figure_a_run_could_not_measure_is_left_out_of_its_spread(tmp_path):
    """A short run has no iteration with requests waiting: its summary holds null there (NaN where read back)."""
    for r, waiting in enumerate((None, 0.25, float("nan"))):
        run_in_round(tmp_path / "real_cpu" / f"paged{r}", "paged", 300.0, r)
        path = tmp_path / "real_cpu" / f"paged{r}" / "summary.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "mem_waiting_token_states": waiting}))
    assert "| paged | 300.0 | 3.00 | 50.0 | 25.0 | 10 |" in section_real(tmp_path / "real_cpu").text
    (tmp_path / "real_cpu" / "paged1" / "summary.json").write_text(json.dumps({
        **json.loads((tmp_path / "real_cpu" / "paged0" / "summary.json").read_text())}))
    assert "| paged | 300.0 | 3.00 | 50.0 | n/a | 10 |" in section_real(tmp_path / "real_cpu").text


def test_two_runs_of_one_engine_in_one_round_are_refused(tmp_path):
    import pytest
    run_in_round(tmp_path / "real_cpu" / "a", "paged", 300.0, 0)
    run_in_round(tmp_path / "real_cpu" / "b", "paged", 310.0, 0)
    with pytest.raises(ValueError, match="two paged runs in round 0"):
        section_real(tmp_path / "real_cpu")
