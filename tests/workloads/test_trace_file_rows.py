"""A trace file's errors name the file and the row; its rows stay in the file's order and keep its ids."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from pagedbench.paths import ROOT
from pagedbench.workloads import WorkloadConfig, build_workload
from pagedbench.workloads.trace_file import read_trace, write_trace

GOOD = {"prompt_len": 4, "output_len": 2, "arrival_s": 0.0}


def write_lines(tmp_path, lines, name="t.jsonl"):
    """A JSON Lines file of these lines: dicts are written as JSON, strings as they are."""
    path = tmp_path / name
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def replay(path, **kwargs):
    return build_workload(WorkloadConfig(name="trace", path=str(path), arrival="trace", **kwargs))


LACKS = object()   # in a bad row: the key is left out


@pytest.mark.parametrize("columns, bad, reason", [
    ({}, {"output_len": 0}, "output_len must be a positive integer, got 0"),
    ({}, {"prompt_len": 2.5}, "prompt_len must be a positive integer, got 2.5"),
    ({}, {"output_len": None}, "output_len must be a positive integer, got no value"),
    ({"arrival_s": 0.0}, {"arrival_s": LACKS}, "arrival_s must be a finite number >= 0, got no value"),
    ({"arrival_s": 0.0}, {"arrival_s": -1}, "arrival_s must be a finite number >= 0, got -1"),
    ({}, {"colour": "red"}, "unknown column 'colour'"),
    ({"n": 1, "beam_width": 2}, {"n": 2}, "a request is either parallel sampling"),
    ({"id": 1}, {"id": -1}, "id must be an integer >= 0, got -1"),
    ({"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [1, 2, 3]}, "prompt_token_ids has 3 ids but prompt_len is 2"),
    ({"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [1, "x"]}, 'prompt_token_ids must be integers in .*, got "x"'),
    ({"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [1, -3]}, "prompt_token_ids must be integers in .*, got -3"),
    ({}, '{"prompt_len": 4, ', "not JSON"),
    ({}, "[4, 2]", "not a JSON object"),
])
def test_a_jsonl_error_names_the_file_and_its_line(tmp_path, columns, bad, reason):
    # Lines 1-2 are good, line 3 is blank (skipped, but counted), line 4 is bad, line 5 good again.
    good = [{"prompt_len": 2, "output_len": 2, **columns, **({"id": k} if "id" in columns else {})} for k in range(3)]
    if isinstance(bad, dict):
        bad = {k: v for k, v in {**good[2], **bad}.items() if v is not LACKS}
    path = write_lines(tmp_path, [good[0], good[1], "", bad, good[2]])
    with pytest.raises(ValueError, match=reason) as err:
        read_trace(path)
    assert str(err.value).startswith(f"{path} line 4: ")
    assert "\n" not in str(err.value)


def test_the_briefs_example_reads_as_one_line(tmp_path):
    path = write_lines(tmp_path, [{"prompt_len": 3, "output_len": 1}] * 6 + [{"prompt_len": 3, "output_len": 0}],
                       name="trace.jsonl")
    with pytest.raises(ValueError) as err:
        read_trace(path)
    assert str(err.value) == f"{path} line 7: output_len must be a positive integer, got 0"


def test_a_parquet_error_names_the_row_from_zero(tmp_path):
    pd.DataFrame({"prompt_len": [3, 4, 5], "output_len": [1, 2, 0]}).to_parquet(tmp_path / "t.parquet")
    with pytest.raises(ValueError) as err:
        read_trace(tmp_path / "t.parquet")
    assert str(err.value) == f"{tmp_path / 't.parquet'} row 2: output_len must be a positive integer, got 0"


def test_rows_of_one_prefix_that_disagree_are_both_named(tmp_path):
    row = {"prompt_len": 6, "output_len": 2, "prefix_id": 3}
    path = write_lines(tmp_path, [{**row, "prefix_len": 2}, {**row, "prefix_id": None, "prefix_len": 0},
                                  {**row, "prefix_len": 4}])
    with pytest.raises(ValueError, match=r"lines 1 and 3: share prefix_id 3 but not its prefix_len \(2 and 4\)"):
        read_trace(path)


def test_arrivals_that_go_backwards_are_refused_at_their_first_line(tmp_path):
    arrivals = [0.0, 1.0, 1.0, 2.0, 1.5, 0.5]
    path = write_lines(tmp_path, [GOOD | {"arrival_s": t} for t in arrivals])
    with pytest.raises(ValueError) as err:
        replay(path)
    assert str(err.value) == (f"{path} line 5: arrival_s 1.5 is earlier than line 4's 2; a trace lists its rows "
                              "in arrival order (or set workload.sort_arrivals=true to sort them)")
    trace = replay(path, sort_arrivals=True)
    assert [r.arrival_s for r in trace] == sorted(arrivals)
    assert [r.id for r in trace] == [0, 5, 1, 2, 4, 3]   # ids are the rows' places in the file; ties keep order


def test_sorting_is_an_option_of_replayed_files_only(tmp_path):
    with pytest.raises(ValueError, match="sort_arrivals=true sorts a replayed file's rows"):
        WorkloadConfig(name="trace", path="t.jsonl", arrival="poisson", request_rate=1.0, sort_arrivals=True)
    with pytest.raises(ValueError, match="sort_arrivals must be true or false"):
        WorkloadConfig(name="trace", path="t.jsonl", arrival="trace", sort_arrivals="yes")
    assert WorkloadConfig(name="trace", path="t.jsonl", arrival="trace").sort_arrivals is False


def test_a_files_ids_are_kept_and_a_file_without_ids_counts_its_rows(tmp_path):
    ids = [900, 7, 42, 0]
    path = write_lines(tmp_path, [GOOD | {"id": i, "arrival_s": 0.1 * k} for k, i in enumerate(ids)])
    trace = replay(path)
    assert [r.id for r in trace] == ids and [r.pair_index for r in trace] == [0, 1, 2, 3]
    plain = replay(write_lines(tmp_path, [GOOD | {"arrival_s": 0.1 * k} for k in range(4)], name="plain.jsonl"))
    assert [r.id for r in plain] == [0, 1, 2, 3]
    # Written back, the ids stay (an id column only when they are not 0..n-1).
    assert [r.id for r in replay(write_trace(trace, tmp_path / "again.parquet"))] == ids
    assert "id" not in read_trace(write_trace(plain, tmp_path / "plain.parquet")).columns


def test_duplicate_ids_name_both_lines(tmp_path):
    path = write_lines(tmp_path, [GOOD | {"id": 5}, GOOD | {"id": 7}, GOOD | {"id": 9}, GOOD | {"id": 7}])
    with pytest.raises(ValueError) as err:
        read_trace(path)
    assert str(err.value) == f"{path} lines 2 and 4: both have id 7; each request's id is its own"


def test_a_trace_with_its_own_ids_runs_on_the_sim(tmp_path):
    ids = [900, 7, 42, 0]
    path = write_lines(tmp_path, [{"id": i, "prompt_len": 10 + k, "output_len": 3, "arrival_s": 0.05 * (k // 2)}
                                  for k, i in enumerate(ids)])
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "run.py", "backend=sim", "workload=trace", f"workload.path={path}",
                           f"hydra.run.dir={out}", "progress=false"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    requests = pd.read_parquet(out / "requests.parquet")
    assert sorted(requests["id"]) == sorted(ids) and (requests["status"] == "finished").all()
    by_id = requests.set_index("id")
    assert by_id.loc[42, "prompt_len"] == 12 and by_id.loc[42, "arrival_s"] == pytest.approx(0.05)
