"""The TPOT split of a peers study (each request's first gap apart from the rest) and its place in the report's
section; and scripts/decode_peers.py's trace and table, on made-up runs."""
import json

import pandas as pd
import pytest

from pagedbench.results.report import tpot_split
from pagedbench.results.report.peers import section_peers
from pagedbench.studies.peers import ROWS, slug, table
from tests.scripts import load_script


def test_the_first_gap_is_split_from_the_decode_steps():
    # A short request whose second token waited 0.5 s, and a long one that decoded steadily at 20 ms.
    short = [0.0, 0.5, 0.52, 0.54, 0.56]
    long = [0.0] + [0.02 * (i + 1) for i in range(99)]
    figures = tpot_split.split([short, long])
    assert figures["tpot_ms"] == pytest.approx(1e3 * (0.56 / 4 + 0.02) / 2)
    assert figures["first_gap_ms"] == pytest.approx(1e3 * (0.5 + 0.02) / 2)
    assert figures["tpot_rest_ms"] == pytest.approx(20.0)
    # ITL weighs every gap alike: 4 of the short request's, 99 of the long one's.
    assert figures["itl_ms"] == pytest.approx(1e3 * (0.56 + 99 * 0.02) / 103)


def test_tpot_divides_by_the_output_length_when_a_chunk_held_two_tokens():
    # Five tokens, four times: TPOT over the four gaps of five tokens, as the study's figure.
    figures = tpot_split.split([[0.0, 0.1, 0.2, 0.4]], output_lens=[5])
    assert figures["tpot_ms"] == pytest.approx(100.0)
    assert figures["tpot_rest_ms"] == pytest.approx(150.0)


def test_requests_with_fewer_than_two_times_are_left_out_and_none_is_an_error():
    figures = tpot_split.split([[0.0], [0.0, 0.01, 0.02]])
    assert figures["first_gap_ms"] == pytest.approx(10.0)
    with pytest.raises(ValueError):
        tpot_split.split([[0.0], []])


def test_run_folders_are_named_as_the_study_names_them():
    from pagedbench.studies.peers import OURS_BESIDE_VLLM, VLLM_BLOCK

    assert all(tpot_split.folder_name(row.name) == slug(row) for row in ROWS)
    assert tpot_split.versus_vllm({"vllm_block_size": VLLM_BLOCK}) == ("vllm (HTTP)", OURS_BESIDE_VLLM)


def write_run(folder, times, output_lens=None):
    folder.mkdir(parents=True)
    pd.DataFrame({"id": range(len(times)), "output_len": output_lens or [len(t) for t in times],
                  "token_times_s": times}).to_parquet(folder / "requests.parquet")


def by_name(name):
    return next(r for r in ROWS if r.name == name)


def test_a_study_folder_is_read_round_by_round_and_paired(tmp_path, capsys):
    vllm, ours = by_name("vllm (HTTP)"), by_name("paged-32 (HTTP)")
    for rnd, (theirs, mine) in enumerate([(0.2, 0.4), (0.3, 0.3)]):
        write_run(tmp_path / f"round{rnd}" / slug(vllm), [[0.0, theirs, theirs + 0.02, theirs + 0.04]])
        write_run(tmp_path / f"round{rnd}" / slug(ours), [[0.0, mine, mine + 0.01, mine + 0.02]])
    (tmp_path / "round1" / "no_table").mkdir()
    assert sorted(tpot_split.study_runs(tmp_path)) == ["paged-32_http", "vllm_http"]    # no peers.json: folders
    (tmp_path / "peers.json").write_text(json.dumps({"rows": [{"row": "vllm (HTTP)"}, {"row": "paged-32 (HTTP)"}]}))
    runs = tpot_split.study_runs(tmp_path)
    assert sorted(runs) == ["paged-32 (HTTP)", "vllm (HTTP)"] and all(len(v) == 2 for v in runs.values())
    ratios = tpot_split.paired(runs["vllm (HTTP)"], runs["paged-32 (HTTP)"])
    assert ratios["first_gap_ms"] == pytest.approx([2.0, 1.0])
    assert ratios["tpot_rest_ms"] == pytest.approx([0.5, 0.5])
    assert tpot_split.main([str(tmp_path), "--rows", "vllm (HTTP)", "paged-32 (HTTP)"]) == 0
    out = capsys.readouterr().out
    assert "| vllm (HTTP) | " in out and "- first_gap_ms: 1.50 (2.00, 1.00)" in out


def test_a_folder_without_token_times_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        tpot_split.main([str(tmp_path)])


def test_the_report_section_shows_the_split_and_ours_over_vllm(tmp_path):
    runs = [{"output_tokens_per_s": 100.0, "ttft_s_mean": 0.1, "tpot_s_mean": 0.01, "e2e_latency_s_mean": 1.0,
             "wall_s": 10.0, "num_finished": 1}]
    results = {"paged-32 (HTTP)": runs, "vllm (HTTP)": runs}
    rows, overhead = table(results, 1)
    (tmp_path / "peers.json").write_text(json.dumps({"command": "c", "requests": 1, "max_output_len": 0, "rate": None,
                                                     "rounds": 1, "rows": rows, "overhead": overhead, "runs": results,
                                                     "setting": {"model": "tiny", "block_size": 16, "threads": 1,
                                                                 "vllm_block_size": 32, "kv_mib": 64,
                                                                 "max_num_seqs": 256, "max_num_batched_tokens": 2048}}))
    assert "Where the TPOT goes" not in section_peers(tmp_path).text
    write_run(tmp_path / "round0" / slug(by_name("vllm (HTTP)")), [[0.0, 0.2, 0.22, 0.24]])
    write_run(tmp_path / "round0" / slug(by_name("paged-32 (HTTP)")), [[0.0, 0.4, 0.41, 0.42]])
    text = section_peers(tmp_path).text
    assert "Where the TPOT goes" in text
    assert "| paged-32 (HTTP) | 140.0 (140.0-140.0) | 400.0 (400.0-400.0) | 10.0 (10.0-10.0) | 140.0 (140.0-140.0) | 1 |" \
        in text
    assert "Our paged server over vLLM, paired by round: TPOT 1.75, first gap 2.00, TPOT with the first gap out 0.50" \
        in text


decode_peers = load_script("decode_peers")


def test_decode_peers_writes_one_trace_of_equal_requests_at_t0(tmp_path):
    path = decode_peers.write_trace(tmp_path / "t" / "b2.jsonl", [[1, 2, 3], [4, 5, 6]], 8)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [{"id": 0, "prompt_len": 3, "output_len": 8, "arrival_s": 0.0, "prompt_token_ids": [1, 2, 3]},
                     {"id": 1, "prompt_len": 3, "output_len": 8, "arrival_s": 0.0, "prompt_token_ids": [4, 5, 6]}]
    from pagedbench.workloads.trace_file import read_trace

    assert len(read_trace(path)) == 2


def test_decode_peers_pairs_tpot_with_vllm_by_round():
    def run(tpot):
        return {"tpot_s_mean": tpot, "output_tokens_per_s": 1 / tpot, "ttft_s_mean": 0.1}

    results = {(8, "vllm (HTTP)"): [run(0.02), run(0.04)], (8, "paged-32 (HTTP)"): [run(0.01), run(0.04)]}
    rows = decode_peers.summarize(results, [8])
    ours = next(r for r in rows if r["row"] == "paged-32 (HTTP)")
    assert ours["tpot_over_vllm"] == [0.5, 1.0] and ours["tpot_s_mean"] == pytest.approx(0.025)
    assert "| 8 | paged-32 (HTTP) | 25.0 (10.0-40.0) |" in decode_peers.markdown(rows, "cmd")
    assert "0.75 (0.50, 1.00)" in decode_peers.markdown(rows, "cmd")


@pytest.mark.parametrize("argv", [["--batches", "0"], ["--batches", "64", "--prompt-len", "64"],
                                  ["--output-len", "1"], ["--only", "nobody"]])
def test_decode_peers_refuses_bad_arguments(argv, tmp_path):
    with pytest.raises(SystemExit):
        decode_peers.main(["--out", str(tmp_path), *argv])
