"""The peers study's table (means, spreads, paired HTTP overheads) and its report section, on made-up runs."""
import json

import pytest

from pagedbench.results.report.peers import section_peers
from pagedbench.studies.peers import ROWS, markdown, slug, table


def runs(tok_s):
    return [{"output_tokens_per_s": t, "ttft_s_mean": 0.1, "tpot_s_mean": 0.01, "e2e_latency_s_mean": 1.0,
             "wall_s": 10.0, "num_finished": 4} for t in tok_s]


def test_the_overhead_pairs_each_round_not_the_means():
    results = {"paged (in process)": runs([100.0, 200.0]), "paged (HTTP)": runs([50.0, 200.0])}
    rows, overhead = table(results, 2)
    paged = next(r for r in rows if r["row"] == "paged (in process)")
    assert paged["output_tokens_per_s"] == 150.0
    assert (paged["output_tokens_per_s_min"], paged["output_tokens_per_s_max"]) == (100.0, 200.0)
    (o,) = overhead
    # Paired: (0.5 + 1.0) / 2 = 0.75, not the ratio of the means (125 / 150 = 0.83).
    assert o["engine"] == "paged" and o["http_over_in_process"] == pytest.approx(0.75)
    assert (o["min"], o["max"], o["pairs"]) == (0.5, 1.0, 2)
    assert "| paged | 0.75 (0.50-1.00), 2 pairs |" in markdown(rows, overhead, "cmd")


def test_every_engine_has_an_in_process_and_an_http_row_with_distinct_folders():
    names = {r.name for r in ROWS}
    for engine in ("static", "orca-max", "paged", "transformers-cb"):
        assert {f"{engine} (in process)", f"{engine} (HTTP)"} <= names
    assert len({slug(r) for r in ROWS}) == len(ROWS)


def test_the_report_section_reads_the_table_or_names_the_command(tmp_path):
    missing = section_peers(tmp_path)
    assert not missing.has_runs and "pagedbench.studies.peers" in missing.not_run[0].command
    rows, overhead = table({"paged (in process)": runs([100.0]), "paged (HTTP)": runs([90.0])}, 1)
    (tmp_path / "peers.json").write_text(json.dumps({"command": "python -m pagedbench.studies.peers --out x", "requests": 4,
                                                     "max_output_len": 128, "rate": None, "rounds": 1, "rows": rows, "overhead": overhead}))
    section = section_peers(tmp_path)
    assert section.has_runs and "| paged (HTTP) | 90.0 (90.0-90.0) |" in section.text
    assert "4 ShareGPT requests all at t = 0, outputs capped at 128 tokens" in section.text
    assert "| paged | 0.90 (0.90-0.90) | 1 |" in section.text


def test_the_section_pairs_our_server_against_transformers_serve_by_round_and_shows_the_kept_before(tmp_path,
                                                                                                   monkeypatch):
    import pagedbench.results.report.peers as peers

    results = {"paged (HTTP)": runs([120.0, 80.0]), "transformers-cb (HTTP)": runs([100.0, 100.0])}
    rows, overhead = table(results, 2)
    (tmp_path / "peers.json").write_text(json.dumps({"command": "c", "requests": 4, "max_output_len": 0,
                                                     "rate": None, "rounds": 2, "rows": rows, "overhead": overhead,
                                                     "runs": results}))
    old = tmp_path / "old"
    old.mkdir()
    before_rows, before_overhead = table({"paged (in process)": runs([100.0]), "paged (HTTP)": runs([40.0])}, 1)
    (old / "peers.json").write_text(json.dumps({"rounds": 1, "rows": before_rows, "overhead": before_overhead}))
    monkeypatch.setattr(peers, "BEFORE", old / "peers.json")
    monkeypatch.setattr(peers, "ROOT", tmp_path)
    text = section_peers(tmp_path).text
    # Paired by round: (1.2 + 0.8) / 2 = 1.00, each round's ratio its own.
    assert "paired by round: 1.00x (0.80-1.20, 2 rounds; ours 120, 80, theirs 100, 100)" in text
    assert "Before: the same study (1 rounds) with the server this one replaced, kept in `old`" in text
    assert "| paged | 0.40 (0.40-0.40) | 1 |" in text
    monkeypatch.setattr(peers, "BEFORE", tmp_path / "none.json")
    assert "Before:" not in section_peers(tmp_path).text
