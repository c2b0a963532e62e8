"""backend=transformers from run.py: the same tables and summary as our engines, on the same trace."""
from hydra import compose, initialize_config_dir
import pandas as pd
import pytest

from pagedbench import run as entry
from pagedbench.paths import ROOT

TRACE = ["workload=synthetic", "workload.num_requests=6", "workload.prompt_dist.low=8", "workload.prompt_dist.high=40",
         "workload.output_dist.mean=8", "workload.max_output_len=12", "workload.arrival=poisson",
         "workload.request_rate=8", "progress=false"]


def run_config(overrides, tmp_path):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    return entry.run(cfg, tmp_path)


@pytest.mark.slow
def test_transformers_continuous_batching_runs_the_trace_as_our_engines_do(tmp_path):
    summary = run_config(["backend=transformers", "model=tiny-llama", *TRACE], tmp_path / "peer")
    ours = run_config(["backend=real", "engine=paged", "model=tiny-llama", *TRACE], tmp_path / "ours")
    assert summary["engine"] == "transformers-cb (sdpa)" and summary["backend"] == "transformers"
    assert summary["num_finished"] == 6 and summary["num_failed"] == 0 and summary["num_iterations"] == 0
    assert summary["mean_batch_size"] != summary["mean_batch_size"]   # NaN: not exposed by the peer
    peer = pd.read_parquet(tmp_path / "peer" / "requests.parquet")
    mine = pd.read_parquet(tmp_path / "ours" / "requests.parquet")
    # The same trace: arrivals, prompt and output lengths; every request generated its whole length.
    for col in ("arrival_s", "prompt_len", "output_len"):
        assert (peer[col] == mine[col]).all(), col
    assert (peer["token_times_s"].map(len) == peer["output_len"]).all()
    assert summary["peer"]["kv_slots"] == ours["kv_capacity_slots"]


def test_a_peer_refuses_parallel_sampling_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="one sequence per request.*sampling=none"):
        run_config(["backend=http", "backend.url=http://127.0.0.1:9", "sampling=n2", *TRACE], tmp_path)


def test_http_needs_a_url(tmp_path):
    with pytest.raises(ValueError, match="backend.url is required"):
        run_config(["backend=http", *TRACE], tmp_path)
