"""The report is built from run folders alone: it writes the parts that have runs, names the rest with the
command that makes them (never a placeholder in their place), refuses to write when it has nothing, and never
overwrites the shipped report from an incomplete set of runs. Capacities that are only bounds say so."""
import subprocess
import sys

import pandas as pd
import pytest

from pagedbench.results.report import paper_sections, write
from pagedbench.results.report.section import NotRun, step_command
from pagedbench.results.report.paper_sections import section_capacity, section_method
from pagedbench.results.report.write import build_report, main
from pagedbench.paths import KEPT_RUNS, OUTPUTS, ROOT


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A stand-in for docs/REPORT.md and its figures, so no test can touch the real ones."""
    docs = tmp_path / "docs"
    (docs / "figures").mkdir(parents=True)
    (docs / "REPORT.md").write_text("the shipped report\n")
    (docs / "figures" / "memory_waste.png").write_bytes(b"shipped figure")
    monkeypatch.setattr(write, "REPORT", docs / "REPORT.md")
    return docs / "REPORT.md"


def sources(tmp_path, real_cpu=None, swap_bench=None):
    """Arguments that read no experiments nor replay, and the kept runs only where given."""
    nothing = tmp_path / "nothing"
    return ["--experiments", str(nothing / "experiments"), "--replay", str(nothing / "replay"),
            "--real-cpu", str(real_cpu or nothing), "--swap-bench", str(swap_bench or nothing),
            "--peers", str(nothing)]


def test_the_report_goes_to_outputs_unless_told():
    assert write.OUT == OUTPUTS / "report" / "REPORT.md"


def test_no_runs_at_all_is_refused_and_nothing_is_written(tmp_path, shipped, capsys):
    out = tmp_path / "report" / "REPORT.md"
    assert main(sources(tmp_path) + ["--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "nothing written" in err
    assert not (tmp_path / "report").exists()
    assert main(sources(tmp_path) + ["--out", str(shipped), "--force"]) == 2      # --force does not invent runs
    assert shipped.read_text() == "the shipped report\n"


def test_a_fresh_clone_writes_what_it_has_runs_for_and_lists_the_rest(tmp_path, capsys):
    out = tmp_path / "report" / "REPORT.md"
    assert main(sources(tmp_path, KEPT_RUNS / "real_cpu", KEPT_RUNS / "swap_bench_cpu") + ["--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    # Figure 19a on the sim needs no runs: its figure is drawn from the presets.
    assert stdout.splitlines()[-1] == f"wrote {out} and 1 figure in {out.parent / 'figures'}"
    sweep = tmp_path / "nothing" / "experiments" / "capacity"
    capacity = f"`python run.py -m experiment=capacity hydra.sweep.dir={sweep}`"
    assert f"not in the report: Figure 12: capacity. Not run: {capacity}" in stdout
    text = out.read_text()
    body, listed = text.split("## Not in this report")
    assert "## The real backend on this machine's CPU" in body and "| paged |" in body        # kept runs are runs
    assert "Figure 19a on this machine's CPU" in body
    assert "## Figure 12" not in body and "Not run" not in body and "No real-backend" not in body
    assert f"- Figure 12: capacity. Not run: {capacity}" in listed
    assert "- Figure 2: KV-memory waste. Not run: `python run.py -m experiment=memory_waste hydra.sweep.dir=" in listed


def test_the_shipped_report_is_not_replaced_by_an_incomplete_one(tmp_path, shipped, capsys):
    args = sources(tmp_path, KEPT_RUNS / "real_cpu") + ["--out", str(shipped)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "--force" in err
    assert shipped.read_text() == "the shipped report\n"
    assert (shipped.parent / "figures" / "memory_waste.png").read_bytes() == b"shipped figure"
    assert main(args + ["--force"]) == 0                                        # unless told to
    assert "## The real backend on this machine's CPU" in shipped.read_text()


def test_a_complete_report_may_replace_the_shipped_one(tmp_path, shipped):
    report = write.Report("# complete\n", has_runs=True)
    assert write.refusal(report, shipped) is None
    assert write.write_report(report, tmp_path / "no_figures", shipped) == shipped
    assert shipped.read_text() == "# complete\n"
    incomplete = write.Report("# part\n", has_runs=True, not_run=[NotRun("Figure 12", "cmd", tmp_path)])
    assert write.refusal(incomplete, shipped) and write.refusal(incomplete, tmp_path / "REPORT.md") is None


def capacity_table(bounds):
    """Two engines, two seeds, both criteria; `bounds` maps (engine, seed) to a bound other than "="."""
    rows = []
    for seed in (0, 1):
        for engine, cap in (("orca-oracle", 2.0), ("paged", 4.0)):
            for criterion in ("latency<=0.2s/tok", "goodput>=90%"):
                rows.append(dict(engine=engine, block_size=16 if engine == "paged" else None, workload="sharegpt",
                                 model="opt-13b", seed=seed, criterion=criterion, capacity=cap,
                                 bound=bounds.get((engine, seed), "="), upper=None, probes=8, done=True, error=None))
    return pd.DataFrame(rows)


def test_the_capacity_sections_name_a_bound_in_words(tmp_path):
    section = section_capacity(capacity_table({("paged", 1): ">="}), None, tmp_path, tmp_path)
    assert "| sharegpt | n/a | n/a | n/a | 2 (2-2) | 4 (4-4), lower bound | 2.00x (2.00x-2.00x), lower bound |" \
        in section.text
    assert " *" not in section.text and "`*`" not in section.text
    assert "paged block 16 sharegpt opt-13b seed 1 latency<=0.2s/tok: lower bound 4 req/s (max_rate)" in section.text
    assert len(section.warnings) == 1 and "capacity/capacity.csv: the capacity of 2 of 8 curves" in section.warnings[0]
    exact = section_capacity(capacity_table({}), None, tmp_path, tmp_path)
    assert "lower bound" not in exact.text and exact.warnings == []
    short = tmp_path / "experiments" / "capacity_1000_requests"
    method = section_method(capacity_table({("orca-oracle", 0): "<"}), None, short)
    assert "| sharegpt | paged / orca-oracle | 2.16x | 2.00x (2.00-2.00), lower bound |" in method.text
    assert [part.command for part in method.not_run] == [step_command(paper_sections.TRACE_LENGTH_STEP, tmp_path)]
    assert method.not_run[0].command.endswith(f"workload.seed=0 hydra.sweep.dir={short}")
    assert method.not_run[0].where == short


def test_the_report_warns_of_bounds_once_per_capacity_table(tmp_path, capsys):
    experiments = tmp_path / "experiments"
    (experiments / "capacity").mkdir(parents=True)
    capacity_table({("paged", 0): ">="}).to_csv(experiments / "capacity" / "capacity.csv", index=False)
    args = sources(tmp_path) + ["--experiments", str(experiments), "--out", str(tmp_path / "r" / "REPORT.md")]
    assert main(args) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "capacity.csv: the capacity of 2 of 8 curves is only a bound" in warnings[0]
    assert "4 (4-4), lower bound" in (tmp_path / "r" / "REPORT.md").read_text()


@pytest.mark.slow
def test_report_from_a_small_memory_waste_sweep(tmp_path):
    sweep = tmp_path / "experiments" / "memory_waste"
    args = [sys.executable, str(ROOT / "run.py"), "-m", "experiment=memory_waste", "workload.num_requests=80",
            "progress=false", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = build_report(tmp_path / "experiments", tmp_path / "no_real_runs", tmp_path / "results" / "REPORT.md")
    text = out.read_text()
    for engine in ("static", "orca-max", "orca-pow2", "orca-oracle", "paged"):
        assert f"| {engine} |" in text
    assert "20.4 / 13.3 / 57.3 / 8.9" in text                       # the paper's figures beside ours
    body, listed = text.split("## Not in this report")
    # Missing experiments are said, not invented: listed at the end with their commands, not as placeholders.
    assert "Not run: `python run.py -m experiment=capacity hydra.sweep.dir=" in listed and "## Figure 12" not in body
    assert "The real backend on this machine's CPU. Not run" in listed and "## The real backend" not in body
    assert "![memory waste](figures/memory_waste.png)" in body      # the link resolves beside the report
    assert (tmp_path / "results" / "figures" / "memory_waste.png").stat().st_size > 0
    assert (sweep / "aggregate.csv").is_file()                      # the sweep aggregated itself when it ended


def test_the_report_says_what_made_it():
    from pagedbench.results.record.result_code import result_code

    made = write.made_by()
    assert result_code() in made and "Rendered at commit" in made
