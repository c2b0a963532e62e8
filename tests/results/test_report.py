"""The report is built from run folders alone and says what is missing."""
import subprocess
import sys

import pytest

from results.report.write import build_report
from paths import ROOT



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
    assert "Not run: `python run.py -m experiment=capacity`" in text  # missing experiments are said, not invented
    assert "No real-backend results" in text
    assert (tmp_path / "results" / "figures" / "memory_waste.png").stat().st_size > 0
    assert (sweep / "aggregate.csv").is_file()                      # the sweep aggregated itself when it ended
