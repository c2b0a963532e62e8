"""The carry of the report's records across a change that moves no result (results/report/carry.py): which runs
it reruns, how it compares them, and how a carried row reads to the staleness check."""
import json

import pandas as pd
import pytest

from pagedbench.results.record.compare import diff_folders, diff_runs, varying_keys
from pagedbench.results.report import carry, current
from pagedbench.results.report.steps import load_steps

STEPS = {s.name: s for s in load_steps()}
CODES = {"all": "a" * 12, "sim": "b" * 12, "nosearch": "c" * 12, "sim_nosearch": "d" * 12}
HEADER = "| step | section | runs | result code | commits | this code | scope |\n|---|---|---|---|---|---|---|\n"


def report(rows: str) -> str:
    return f"# R\n\n## Figure 2\n\ntext\n\n{current.RECORDS_HEADING}\n\nwhich code\n\n{HEADER}{rows}\n## After\n\nend\n"


def test_a_row_carried_to_this_code_in_its_scope_is_current_and_any_other_is_stale():
    rows = ("| memory_waste | Figure 2 | 5 | 0123456789ab | 170b0a3f04d9 | yes | sim_nosearch |\n"
            "| capacity | Figure 12 | 400 | 0123456789ab | 170b0a3f04d9 | yes | sim |\n"
            "| chat | Chatbot | 134 | 0123456789ab | 170b0a3f04d9 | yes | sim |\n")
    never = lambda commit: {s: "f" * 12 for s in CODES}   # noqa: E731  (no commit's tree has this code)
    text = report(rows)
    assert {s.step for s in current.stale_sections(text, CODES, at=never)} == {"memory_waste", "capacity", "chat"}
    stamped = carry.stamp_rows(text, {"memory_waste": (CODES["sim_nosearch"], 5), "capacity": ("e" * 12, 5)})
    assert "| memory_waste | Figure 2 | 5 | 0123456789ab | 170b0a3f04d9 | carried | sim_nosearch | to " \
           f"{CODES['sim_nosearch']} by 5 equal reruns |" in stamped
    assert "| chat | Chatbot | 134 | 0123456789ab | 170b0a3f04d9 | yes | sim | - |" in stamped
    assert stamped.endswith("## After\n\nend\n") and "| carried |" in stamped
    # carried to this code: current; carried to another code (capacity) or never (chat): stale
    assert {s.step for s in current.stale_sections(stamped, CODES, at=never)} == {"capacity", "chat"}
    # a row carried to the whole code is current in any scope; the made code and commits stay as they were
    again = carry.stamp_rows(stamped, {"chat": (CODES["all"], 3)})
    assert {s.step for s in current.stale_sections(again, CODES, at=never)} == {"capacity"}
    assert [r[3:5] for r in current.records_rows(again)] == [["0123456789ab", "170b0a3f04d9"]] * 3


@pytest.mark.parametrize("cell", ["", "-", "to", f"to {'d' * 12} by 0 equal reruns", f"to {'d' * 12} by x equal",
                                  f"from {'d' * 12} by 3 equal reruns"])
def test_a_malformed_or_empty_carried_cell_carries_nothing(cell):
    assert current.carried_to(cell) is None


def test_a_sweep_steps_sample_is_seeded_holds_three_runs_at_least_and_every_engine():
    step = STEPS["capacity"]
    first = carry.samples(step, 3, seed=0)
    assert first == carry.samples(step, 3, seed=0) != carry.samples(step, 3, seed=1)
    engines = {a.split("=", 1)[1] for s in first for a in s.args if a.startswith("engine=")}
    assert engines == {"static", "orca_max", "orca_pow2", "orca_oracle", "paged"} and len(first) >= 5
    assert all(s.run and s.args[0] == "run.py" and "-m" not in s.args for s in first)
    rates = {a for s in first for a in s.args if a.startswith("workload.request_rate=")}
    assert rates and all(float(r.split("=")[1]) in carry.SEARCH_RATES for r in rates)   # a search's first rates


def test_a_step_of_one_run_is_sampled_on_seeded_traces_and_a_timed_one_at_its_quick_size():
    step = STEPS["static_reference"]
    sample = carry.samples(step, 3, seed=0)
    assert len(sample) == 3 and len({s.args for s in sample}) == 3
    assert all(set(step.quick) <= set(s.args) for s in sample)   # timed: the quick size
    study = carry.samples(STEPS["beam_persistence"], 3, seed=0)
    assert [s.run for s in study] == [False] and "{out}" in study[0].args


def write_run(folder, summary: dict, latency: list[float]):
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    pd.DataFrame({"t": latency, "tokens": [1, 2]}).to_parquet(folder / "iterations.parquet")
    pd.DataFrame({"id": [0, 1]}).to_parquet(folder / "requests.parquet")


def test_a_difference_is_named_by_key_and_the_clock_s_keys_are_found_by_a_second_run(tmp_path):
    write_run(tmp_path / "base", {"throughput": 1.5, "tokens": 10, "wall_s": 3.0}, [0.1, 0.2])
    write_run(tmp_path / "here", {"throughput": 1.5, "tokens": 10, "wall_s": 9.0}, [0.1, 0.2])
    assert diff_runs(tmp_path / "base", tmp_path / "here") == []          # the machine's wall_s is left out
    write_run(tmp_path / "edited", {"throughput": 1.5, "tokens": 11, "wall_s": 3.0}, [0.1, 0.2])
    assert diff_runs(tmp_path / "base", tmp_path / "edited") == ["tokens: 10 -> 11"]
    write_run(tmp_path / "timed1", {"throughput": 1.7, "tokens": 10}, [0.3, 0.2])
    write_run(tmp_path / "timed2", {"throughput": 1.9, "tokens": 10}, [0.4, 0.2])
    clock = varying_keys(tmp_path / "timed1", tmp_path / "timed2")
    assert clock == {"summary.json:throughput", "iterations.parquet:t"}
    assert carry.diff_run_folders(tmp_path / "base", tmp_path / "timed1", clock) == []
    write_run(tmp_path / "timed3", {"throughput": 1.8, "tokens": 12}, [0.5, 0.2])
    assert carry.diff_run_folders(tmp_path / "base", tmp_path / "timed3", clock) == ["tokens: 10 -> 12"]
    assert diff_folders(tmp_path / "base", tmp_path / "timed3", ignore=clock) == ["summary.json tokens: 10 -> 12"]


def test_a_timed_runs_figures_bounded_in_time_are_left_out_though_two_runs_here_agree_on_them(tmp_path):
    """Two quick runs here meet the SLO for every request and give every token in one second; the records' run,
    on a loaded machine, met it for none. These compare times with a bound, so the clock feeds them even where a
    second run does not show it."""
    write_run(tmp_path / "base", {"slo_attainment": 0.0, "steady_goodput_requests_per_s": 0.0, "tokens": 10}, [0.1, 0.2])
    (tmp_path / "base" / "vllm_result.json").write_text(json.dumps({"max_output_tokens_per_s": 65.0}))
    write_run(tmp_path / "here", {"slo_attainment": 1.0, "steady_goodput_requests_per_s": 2.0, "tokens": 10}, [0.1, 0.2])
    (tmp_path / "here" / "vllm_result.json").write_text(json.dumps({"max_output_tokens_per_s": 219.0}))
    assert varying_keys(tmp_path / "here", tmp_path / "here") == set()
    fed = carry.bounded(tmp_path / "here")
    assert fed == {"summary.json:slo_attainment", "summary.json:steady_goodput_requests_per_s",
                   "vllm_result.json:max_output_tokens_per_s"}
    assert carry.diff_run_folders(tmp_path / "base", tmp_path / "here", frozenset(fed)) == []
    assert diff_folders(tmp_path / "base", tmp_path / "here", ignore=frozenset(fed)) == []
    assert len(diff_folders(tmp_path / "base", tmp_path / "here")) == 3
    write_run(tmp_path / "edited", {"slo_attainment": 1.0, "steady_goodput_requests_per_s": 2.0, "tokens": 9}, [0.1, 0.2])
    assert carry.diff_run_folders(tmp_path / "base", tmp_path / "edited", frozenset(fed)) == ["tokens: 10 -> 9"]


def test_the_clock_fed_keys_are_what_moves_on_a_warped_clock(tmp_path):
    """A run's own tables summarized again on warped clocks: latencies, rates and time-weighted figures move,
    counts do not; a summary of a study's subfolder is named by its path. The warp keeps the clock's order."""
    from pagedbench.results.record.summary import summarize
    from tests.results.test_metrics_timelines import ITERATIONS, REQS

    run = tmp_path / "round0" / "paged"
    run.mkdir(parents=True)
    ITERATIONS.to_parquet(run / "iterations.parquet")
    REQS.to_parquet(run / "requests.parquet")
    (run / "summary.json").write_text(json.dumps({"x": 1}))
    fed = carry.clock_fed(tmp_path)
    keys = {k.split(":", 1)[1] for k in fed}
    assert all(k.startswith("round0/paged/summary.json:") for k in fed)
    assert {"makespan_s", "ttft_s_mean", "output_tokens_per_s", "mem_token_states", "mean_batch_size"} <= keys
    assert not keys & {"num_requests", "num_finished", "num_iterations", "kv_capacity_slots", "num_preemptions"}
    assert set(summarize(ITERATIONS, REQS)) > keys
    for bend in carry.WARPS:
        its, reqs = carry.warped(ITERATIONS, REQS, bend)
        assert (its["duration_s"] > 0).all() and its["start_s"].is_monotonic_increasing
        assert ((reqs["finish_s"] >= reqs["arrival_s"]) | reqs["finish_s"].isna()).all()


def test_a_time_weighted_mean_moved_only_in_its_last_bit_is_clock_fed(tmp_path):
    """A constant series' time-weighted mean: the clock moves it only through the rounding of its weights' sums.
    On this table the large bends leave it equal to the bit and a tiny one moves its last bit (two reruns of the
    replay study differed so, and the carry had called it a difference)."""
    import numpy as np

    from pagedbench.results.record.summary import summarize
    from tests.results.test_metrics_timelines import ITERATIONS, REQS

    iterations = ITERATIONS.assign(duration_s=ITERATIONS["duration_s"]
                                   * (1 + np.random.default_rng(0).random(len(ITERATIONS)) * 1e-3), reservation=7)
    plain = summarize(iterations, REQS)["mem_reservation"]
    moved = {bend: summarize(*carry.warped(iterations, REQS, bend))["mem_reservation"]
             for bend in (0.5, 1.0, 3.0, 1e-8, 1e-7, 1e-6, 1e-4)}
    if any(moved[bend] != plain for bend in (0.5, 1.0, 3.0)) or all(v == plain for v in moved.values()):
        pytest.skip("this platform's sums round the table otherwise: the case does not arise")
    run = tmp_path / "run"
    run.mkdir()
    iterations.to_parquet(run / "iterations.parquet")
    REQS.to_parquet(run / "requests.parquet")
    (run / "summary.json").write_text(json.dumps({"x": 1}))
    assert "run/summary.json:mem_reservation" in carry.clock_fed(tmp_path)
    assert "run/summary.json:num_requests" not in carry.clock_fed(tmp_path)


def test_the_records_worktree_gets_this_checkouts_vllm_environment_linked(tmp_path, monkeypatch):
    checkout, tree = tmp_path / "checkout", tmp_path / "tree"
    (checkout / ".venv-vllm" / "bin").mkdir(parents=True)
    tree.mkdir()
    monkeypatch.setattr(carry, "ROOT", checkout)
    carry.share_environments(tree)
    assert (tree / ".venv-vllm").is_symlink() and (tree / ".venv-vllm" / "bin").is_dir()
    carry.share_environments(tree)   # already there: left as it is
    other = tmp_path / "bare"
    other.mkdir()
    monkeypatch.setattr(carry, "ROOT", tmp_path / "no-checkout")
    carry.share_environments(other)  # no environment here: nothing linked
    assert not (other / ".venv-vllm").exists()
