"""vLLM itself as a peer, on this CPU: the peers study with its vLLM row beside our paged server, and the
interop both ways (`vllm bench serve` driving our server, `pagedbench bench` driving vLLM, both result files
read back by `read_vllm_result`). Slow; skipped without vLLM's environment (`make vllm-env`)."""
import json
import os
import subprocess
import sys

import pytest

from pagedbench.engines.peers.server_process import free_port, launched
from pagedbench.paths import ROOT
from pagedbench.results.record.vllm_result import read_vllm_result
from pagedbench.studies import peers

VLLM = peers.vllm_command()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(VLLM is None, reason="vLLM's environment is not built: run `make vllm-env`")]
ENV = {**peers.OFFLINE, **peers.thread_env(1)}


@pytest.fixture(scope="module")
def opt_folder(tmp_path_factory):
    """The tiny OPT model's folder, as the study makes it (seeded weights, a tokenizer trained here)."""
    return peers.model_dir(tmp_path_factory.mktemp("vllm"), "tiny")


def vllm_server(folder, port: int):
    setup = peers.Setup(model="tiny", threads=1, vllm=VLLM)
    cmd = peers.server_cmd(peers.BESIDE_VLLM[0], folder, port, folder.parent, setup)
    return launched(cmd, f"http://127.0.0.1:{port}", env=ENV, cwd=ROOT, log=folder.parent / f"vllm-{port}.log",
                    ready_timeout_s=300)


def test_the_study_runs_vllm_beside_our_paged_server_with_equal_greedy_tokens(opt_folder, tmp_path):
    # Up to 96 tokens each: a run must outlast a few of the study's 0.2 s /metrics polls to show its batch (6
    # requests of 12 tokens ended between two polls once our server ran at vLLM's pace).
    out = opt_folder.parent
    done = subprocess.run([sys.executable, "-m", "pagedbench.studies.peers", "--out", str(out), "--model", "tiny",
                           "--threads", "1", "--requests", "6", "--max-output-len", "96", "--rounds", "1",
                           "--only", "vllm (HTTP)", "paged-32 (HTTP)", "paged-32 (sim)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, **ENV})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "peers.json").read_text())
    assert {r["row"] for r in result["rows"]} == {"vllm (HTTP)", "paged-32 (HTTP)", "paged-32 (sim)"}
    for name in ("vllm (HTTP)", "paged-32 (HTTP)", "paged-32 (sim)"):
        (run,) = result["runs"][name]
        assert run["num_finished"] == 6 and run["output_tokens_per_s"] > 0
        assert run["schedule"]["running_max"] >= 1 and run["schedule"]["preemptions"] is not None
    assert result["setting"] == {"model": "tiny", "block_size": 16, "vllm_block_size": 32, "sim_hardware": "cpu-tiny",
                                 "threads": 1, "kv_mib": peers.KV_MIB, "max_num_seqs": peers.MAX_NUM_SEQS,
                                 "max_num_batched_tokens": peers.MAX_BATCH_TOKENS}
    greedy = result["greedy"]
    assert greedy["prompts"] == peers.GREEDY_PROMPTS
    assert greedy["prompts_equal"] == greedy["prompts"], greedy
    assert result["versus_vllm"]["pairs"] == 1
    assert "Greedy tokens, vLLM against our paged server" in (out / "peers.md").read_text()


def test_vllm_bench_serve_drives_our_server_and_its_result_reads_back(opt_folder, tmp_path):
    port = free_port()
    cmd = [sys.executable, "serve.py", "engine=paged", "model=tiny", "engine.block_size=32", f"serve.port={port}",
           f"serve.tokenizer=hf:{opt_folder}", f"hydra.run.dir={tmp_path / 'serve'}"]
    with launched(cmd, f"http://127.0.0.1:{port}", env=ENV, cwd=ROOT, log=tmp_path / "serve.log"):
        done = subprocess.run([str(VLLM), "bench", "serve", "--backend", "vllm", "--base-url",
                               f"http://127.0.0.1:{port}", "--model", "pagedbench-paged-tiny", "--tokenizer",
                               str(opt_folder), "--dataset-name", "random", "--random-input-len", "24",
                               "--random-output-len", "8", "--num-prompts", "6", "--ignore-eos", "--seed", "0",
                               "--save-result", "--result-dir", str(tmp_path), "--result-filename", "vllm.json"],
                              capture_output=True, text=True, timeout=600, env={**os.environ, **ENV})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = read_vllm_result(tmp_path / "vllm.json")
    assert figures["num_finished"] == 6 and figures["total_output_tokens"] == 48
    assert figures["output_tokens_per_s"] > 0 and figures["ttft_s_mean"] > 0


def test_pagedbench_bench_drives_vllm_and_its_result_reads_back(opt_folder, tmp_path):
    port = free_port()
    with vllm_server(opt_folder, port):
        done = subprocess.run([sys.executable, "-m", "pagedbench", "bench", "--base-url", f"http://127.0.0.1:{port}",
                               "--tokenizer", f"hf:{opt_folder}", "--dataset-name", "random", "--random-input-len",
                               "24", "--random-output-len", "8", "--num-prompts", "6", "--save-result",
                               "--result-dir", str(tmp_path), "--result-filename", "ours.json"],
                              cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, **ENV})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = read_vllm_result(tmp_path / "ours.json")
    assert figures["num_finished"] == 6 and figures["total_output_tokens"] == 48
    assert figures["output_tokens_per_s"] > 0
