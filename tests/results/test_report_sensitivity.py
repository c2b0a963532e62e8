"""The report's sensitivity section: ratios at each end of an input's range beside the preset's, and a verdict
that says which conclusion holds."""
import pandas as pd

from pagedbench.results.report.sensitivity import section_sensitivity, verdict


def rows(fig, label, claim, name, value, base, ratio, bound=False):
    return dict(figure=fig, label=label, claim=claim, input=name, value=value, range=f"{name}: why",
                baseline=base, paged=1.0, baseline_capacity=1.0 / ratio, ratio=ratio, ratio_is_bound=bound)


def test_verdicts():
    assert verdict([2.5, 2.4, 2.6], 2.3) == "both hold (>= 2.3x throughout)"
    assert verdict([2.5, 1.4, 2.6], 2.3) == "paged ahead throughout; the paper's 2.3x not reached (min 1.40x)"
    assert verdict([2.5, 0.9], 2.3) == "does not hold: paged falls to 0.90x"


def test_section_reads_the_table(tmp_path):
    t = pd.DataFrame([
        rows("15", "Figure 15", 2.3, "default", None, "orca-oracle", 2.4),
        rows("15", "Figure 15", 2.3, "default", None, "orca-max", 5.0),
        rows("15", "Figure 15", 2.3, "beam_persistence", 0.99, "orca-oracle", 1.5, bound=True),
        rows("15", "Figure 15", 2.3, "beam_persistence", 0.0, "orca-oracle", 2.9),
        rows("15", "Figure 15", 2.3, "beam_persistence", 0.99, "orca-max", 3.0),
        rows("15", "Figure 15", 2.3, "beam_persistence", 0.0, "orca-max", 6.0),
    ])
    t.to_csv(tmp_path / "sensitivity.csv", index=False)
    section = section_sensitivity(tmp_path)
    assert section.has_runs
    assert ("| Figure 15 | beam_persistence | 0 / preset / 0.99 | orca-oracle | 2.90x | 2.40x | 1.50x* | "
            "paged ahead throughout; the paper's 2.3x not reached (min 1.50x) |") in section.text
    assert "| orca-max | 6.00x | 5.00x | 3.00x | paged ahead throughout |" in section.text
    assert "- `beam_persistence`: beam_persistence: why." in section.text


def test_section_without_the_table_names_its_command(tmp_path):
    section = section_sensitivity(tmp_path / "sensitivity")
    assert not section.has_runs and section.text == ""
    folder = tmp_path / "sensitivity"
    assert [(p.part, p.command, p.where) for p in section.not_run] == [
        ("Sensitivity of the claim (Figures 12, 15, 17)", f"python -m pagedbench.studies.sensitivity --out {folder}", folder)]
