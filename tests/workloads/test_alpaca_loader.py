import pytest

from pagedbench.workloads import WorkloadConfig, build_workload
from pagedbench.workloads.alpaca import alpaca_pair, read_alpaca


def test_prompt_is_instruction_then_input(data_dir):
    pairs, info = read_alpaca(data_dir / "alpaca_small.json")
    assert info == {"records": 6, "pairs": 4}
    assert pairs[0][0] == "Give three tips for staying healthy."
    assert pairs[1] == (
        "Translate the sentence into French.\n\nThe cat sleeps on the warm windowsill.",
        "Le chat dort sur le rebord de fenêtre chaud.",
    )


@pytest.mark.parametrize("record", ["text", {"instruction": "x"}, {"output": "y"}, {"instruction": 1, "output": "y"}])
def test_malformed_records_are_skipped(record):
    assert alpaca_pair(record) is None


def test_missing_input_key_means_no_input():
    assert alpaca_pair({"instruction": "Do it.", "output": "Done."}) == ("Do it.", "Done.")


def test_build_from_file_applies_filters(data_dir):
    path = str(data_dir / "alpaca_small.json")
    # "Jupiter." is under 4 tokens, so 3 of the 4 pairs are left
    trace = build_workload(WorkloadConfig(name="alpaca", path=path, num_requests=3))
    assert len(trace) == 3 and all(r.output_len >= 4 for r in trace)
    assert len({r.pair_index for r in build_workload(WorkloadConfig(name="alpaca", path=path,
                                                                     num_requests=4))}) == 3


@pytest.mark.parametrize(
    "text, message",
    [("{\"instruction\": \"x\"}", "must hold a JSON list"), ("[{", "not valid JSON"), ("[1, 2]", "no usable Alpaca record")],
)
def test_bad_files_are_clear_errors(tmp_path, text, message):
    path = tmp_path / "alpaca_data.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_alpaca(path)


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        build_workload(WorkloadConfig(name="alpaca", path=str(tmp_path / "none.json"), num_requests=1))
