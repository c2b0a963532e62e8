"""The report's beam-model parts: the persistence calibration table marks the best fit and the preset."""
import pandas as pd

from results.report.beams import section_persistence


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


def test_persistence_without_runs_names_its_command(tmp_path):
    section = section_persistence(tmp_path / "none" / "persistence.csv")
    assert section.text == "" and [p.command for p in section.not_run] == ["python -m studies.beam_persistence"]
