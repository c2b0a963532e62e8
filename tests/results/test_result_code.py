"""The result-affecting code's hash: which files it covers, and that it moves with them and only with them."""
from __future__ import annotations

import shutil
import subprocess

from pagedbench.paths import ROOT
from pagedbench.results.record.result_code import RESULT_PATHS, digest, files, result_code


def test_it_covers_the_engines_workloads_conf_and_packaged_data_and_not_the_report():
    names = files()
    for expected in ("engines/engine.py", "engines/kv/block_pool.py", "workloads/config.py", "conf/config.yaml",
                     "conf/hardware/a100-40gb.yaml", "data/traces/sharegpt_64_seed2.jsonl",
                     "results/record/summary.py", "results/sweeps/capacity.py"):
        assert expected in names
    assert not any(n.startswith(("results/report/", "tests/", "docs/")) or n == "README.md" for n in names)
    assert not any("__pycache__" in n for n in names)
    assert result_code() == digest() and len(result_code()) == 12


def _copy(tmp_path):
    for path in RESULT_PATHS:
        src = ROOT / path
        if src.is_dir():
            shutil.copytree(src, tmp_path / path, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, tmp_path / path)
    (tmp_path / "README.md").write_text("readme")
    return tmp_path


def test_an_engine_edit_moves_it_and_a_readme_edit_does_not(tmp_path):
    root = _copy(tmp_path)          # not a git checkout: every file under the paths
    before = digest(root)
    assert before == digest(ROOT)   # the same bytes give the same hash, in git or not
    (root / "README.md").write_text("another readme")
    assert digest(root) == before
    engine = root / "engines" / "engine.py"
    engine.write_text(engine.read_text() + "\n# a comment\n")
    assert digest(root) != before
    engine.write_text(engine.read_text()[:-len("\n# a comment\n")])
    assert digest(root) == before
    (root / "conf" / "hardware" / "new.yaml").write_text("name: new\n")   # a new preset is result-affecting too
    assert digest(root) != before


def test_in_git_an_untracked_file_counts_and_an_ignored_one_does_not(tmp_path):
    root = _copy(tmp_path)
    (root / ".gitignore").write_text("*.log\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    before = digest(root)
    assert before == digest(ROOT)
    (root / "engines" / "scratch.log").write_text("ignored")
    assert digest(root) == before
    (root / "engines" / "new_manager.py").write_text("x = 1\n")
    assert digest(root) != before


def test_a_copy_in_an_ignored_folder_of_a_checkout_is_walked(tmp_path):
    """A copy of the tree inside a checkout whose git ignores it (mutation testing's mutants/): git lists none of
    its files, so they are walked, and it hashes as the checkout does."""
    outer = tmp_path / "checkout"
    outer.mkdir()
    (outer / ".gitignore").write_text("copy/\n")
    subprocess.run(["git", "init", "-q"], cwd=outer, check=True)
    root = _copy(outer / "copy")
    assert "engines/engine.py" in files(root)
    assert digest(root) == digest(ROOT)
