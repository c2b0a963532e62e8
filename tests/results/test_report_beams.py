"""The report's beam-model parts: the persistence calibration table marks the best fit and the preset; the
gap without persistence is computed from the records; a part without records is named by its step."""
import pandas as pd

from pagedbench.engines.sim.build import SimBackendConfig
from pagedbench.results.report.beams import section_beam_check
from pagedbench.results.report.sharing import section_persistence
from pagedbench.results.report.section import typed_command
from pagedbench.results.report.section import step_command


def test_persistence_table_marks_the_least_squares_fit_and_the_preset(tmp_path):
    # Width 2 / 4 / 6 savings per persistence at two rates; 0.95 (the preset) is closest to 37.56 / 53.13 / 55.16.
    points = {0.0: (42.0, 63.0, 70.0), 0.9: (39.0, 57.0, 62.0), 0.95: (37.0, 53.0, 56.0), 0.99: (25.0, 35.0, 37.0)}
    rows = [dict(rate=r, width=w, persistence=p, saving=s + (0.2 if r == 12 else -0.2))
            for p, savings in points.items() for w, s in zip((2, 4, 6), savings) for r in (4, 12)]
    pd.DataFrame(rows).to_csv(tmp_path / "persistence.csv", index=False)
    text = section_persistence(tmp_path / "persistence.csv").text
    assert "| 0.95 (best fit) (preset) | 37.0 | 53.0 | 56.0 |" in text
    assert "| 0.9 | 39.0 | 57.0 | 62.0 |" in text and "| paper | 37.6 | 53.1 | 55.2 |" in text
    assert "at 4 and 12 req/s" in text
    assert "`python -m pagedbench.studies.beam_persistence`" in text
    # Without persistence the savings run 4.4 (width 2) to 14.8 (width 6) points above the paper's.
    assert "lineages merge within a few steps and the savings run 4-15 points above the paper's." in text
    pd.DataFrame([r for r in rows if r["persistence"] > 0]).to_csv(tmp_path / "persistence.csv", index=False)
    assert "lineages merge within a few steps.\n" in section_persistence(tmp_path / "persistence.csv").text


def test_without_runs_each_part_names_its_step(tmp_path):
    section = section_persistence(tmp_path / "beam_persistence" / "persistence.csv")
    assert section.text == "" and [p.command for p in section.not_run] == [step_command("beam_persistence", tmp_path)]
    assert section.not_run[0].command.endswith(f"--out {tmp_path / 'beam_persistence'}")
    assert [p.where for p in section.not_run] == [tmp_path / "beam_persistence"]
    section = section_beam_check(tmp_path / "beam_check" / "beam_check.csv")
    assert section.text == "" and [(p.part, p.command) for p in section.not_run] == [
        ("The sim's beam model against the real beam search (Figures 14-15)", step_command("beam_check", tmp_path))]


def test_the_commands_shown_are_the_steps_less_their_folder():
    assert typed_command("beam_persistence") == "python -m pagedbench.studies.beam_persistence"
    assert typed_command("beam_check") == "python -m pagedbench.studies.beam_check"
    assert typed_command("beam_seqcap") == ("python run.py -m experiment=beam limits.max_num_seqs=1024 "
                                            "experiment_name=beam_seqcap")


def test_beam_check_quotes_the_presets_model_and_the_largest_gaps(tmp_path):
    (tmp_path / "beam_check").mkdir()
    pd.DataFrame([{"beam_width": w, "fitted_decay": 0.3, "real_distinct_parents": 1.4, "model_distinct_parents": 1.3,
                   "real_saving": real, "sim_saving_fitted": fitted, "sim_saving_decay_1": one}
                  for w, real, fitted, one in [(2, 0.40, 0.41, 0.405), (4, 0.60, 0.63, 0.602)]]).to_csv(
        tmp_path / "beam_check" / "beam_check.csv", index=False)
    text = section_beam_check(tmp_path / "beam_check" / "beam_check.csv").text
    preset = SimBackendConfig()
    assert f"use decay {preset.beam_parent_decay:g} and persistence {preset.beam_persistence:g}" in text
    assert "within 3.0 points of the real search's with the fitted decay and within 0.5 with the default" in text
    assert "| 4 | 0.30 | 1.40 | 1.30 | 60.0 | 63.0 | 60.2 |" in text
    assert "`python -m pagedbench.studies.beam_check`" in text
