"""End to end over HTTP: `transformers serve` and our serve.py started on localhost (a model folder made here,
no network), a short trace replayed by `run.py backend=http`, the summaries checked; and the three ways a
remote run fails (nothing listening, a server that dies mid-run, one that answers errors), each one line and
a failed-run record. Every server is stopped, pass or fail (`launched`)."""
import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from pagedbench.engines.peers.server_process import free_port, launched
from pagedbench.engines.real.local_model import save_local_model
from pagedbench.engines.specs.presets import load_model
from pagedbench.paths import ROOT

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
# Six requests arriving at 4 req/s, outputs of at most 12 tokens.
TRACE = ["workload.num_requests=6", "workload.max_output_len=12", "workload.arrival=poisson",
         "workload.request_rate=4", "progress=false"]
SYNTHETIC = ["workload=synthetic", "workload.prompt_dist.low=8", "workload.prompt_dist.high=40",
             "workload.output_dist.mean=8"]


def run_http(url: str, out, *overrides: str, timeout: float = 240) -> subprocess.CompletedProcess:
    args = [sys.executable, "run.py", "backend=http", f"backend.url={url}", "backend.read_timeout_s=30",
            f"hydra.run.dir={out}", *TRACE, *overrides]
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=_env())


def _env():
    import os

    return {**os.environ, **OFFLINE}


def finished_summary(proc, out) -> dict:
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    requests = pd.read_parquet(out / "requests.parquet")
    assert summary["backend"] == "http" and summary["num_finished"] == 6 and summary["num_failed"] == 0
    assert (requests["status"] == "finished").all()
    assert (requests["first_token_s"] > requests["arrival_s"]).all()
    assert (requests["finish_s"] >= requests["first_token_s"]).all()
    assert summary["ttft_s_mean"] > 0 and summary["output_tokens_per_s"] > 0
    return summary


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    texts = [json.dumps(r) for r in json.loads((ROOT / "tests/data/sharegpt_small.json").read_text())] * 20
    return save_local_model(load_model("tiny-llama"), tmp_path_factory.mktemp("tiny-llama"), texts=texts,
                            vocab_size=512)


@pytest.mark.slow
def test_transformers_serve_replays_a_trace(model_dir, tmp_path):
    exe = shutil.which("transformers", path=str(ROOT / ".venv/bin")) or shutil.which("transformers")
    if exe is None:
        pytest.skip("transformers' CLI (transformers[serving]) is not installed")
    port = free_port()
    cmd = [exe, "serve", str(model_dir), "--continuous-batching", "--cb-block-size", "16", "--cb-num-blocks",
           "256", "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    with launched(cmd, f"http://127.0.0.1:{port}", env=OFFLINE, log=tmp_path / "server.log") as server:
        # transformers serve takes text only and refuses unknown keys (no ignore_eos); the folder's model has
        # no EOS token, so it generates max_tokens.
        proc = run_http(server.url, tmp_path / "run", "workload=sharegpt", f"workload.tokenizer=hf:{model_dir}",
                        "backend.prompt=text", f"backend.tokenizer=hf:{model_dir}", "backend.ignore_eos=false",
                        "model=tiny-llama")
    summary = finished_summary(proc, tmp_path / "run")
    assert summary["served_model"] == str(model_dir)
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert requests["output_len"].between(1, 12).all()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["paged", "orca_oracle"])
def test_our_server_replays_a_trace_through_the_same_client(engine, tmp_path):
    port = free_port()
    cmd = [sys.executable, "serve.py", f"engine={engine}", "model=tiny", f"serve.port={port}",
           f"hydra.run.dir={tmp_path / 'serve'}"]
    with launched(cmd, f"http://127.0.0.1:{port}", env=OFFLINE, cwd=ROOT, log=tmp_path / "server.log") as server:
        proc = run_http(server.url, tmp_path / "run", *SYNTHETIC)
    summary = finished_summary(proc, tmp_path / "run")
    assert engine.replace("_", "-") in summary["served_model"]
    assert summary["server"]["server"].startswith("pagedbench/")
    # Our engines generate exactly max_tokens: every request's recorded length is the trace's.
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert summary["trace_draws"] == 6 and requests["output_len"].between(1, 12).all()


def failed_run(proc, out, expect: str) -> dict:
    assert proc.returncode == 1, proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    lines = [l for l in output.splitlines() if "error:" in l]
    assert len(lines) == 1 and expect in lines[0], output[-2000:]
    assert "Traceback" not in output
    assert not (out / "summary.json").exists()
    return json.loads((out / "error.json").read_text())


@pytest.mark.slow
def test_nothing_listening_is_one_line_and_a_failed_run(tmp_path):
    proc = run_http(f"http://127.0.0.1:{free_port()}", tmp_path, *SYNTHETIC, timeout=120)
    record = failed_run(proc, tmp_path, "connection refused")
    assert record["kind"] == "no result" and "failures" not in record


@pytest.mark.slow
@pytest.mark.parametrize("mode, expect", [("die", "requests failed"), ("error", "HTTP 500")])
def test_a_server_that_dies_or_errs_gives_one_line_and_a_failed_run(mode, expect, tmp_path):
    port = free_port()
    cmd = [sys.executable, str(ROOT / "tests/peers/failing_server.py"), str(port), mode]
    with launched(cmd, f"http://127.0.0.1:{port}", log=tmp_path / "server.log"):
        proc = run_http(f"http://127.0.0.1:{port}", tmp_path / "run", *SYNTHETIC, "backend.connect_timeout_s=2",
                        timeout=120)
    record = failed_run(proc, tmp_path / "run", expect)
    assert record["kind"] == "requests failed" and record["failures"]
    if mode == "die":   # the two requests served before the server died are kept, in a partial summary
        assert record["partial_summary"]["num_finished"] == 2 and record["partial_summary"]["num_failed"] == 4
