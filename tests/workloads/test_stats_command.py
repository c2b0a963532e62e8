import math
import os
import subprocess
import sys

import pytest

from pagedbench.workloads import Request, format_stats, trace_stats
from pagedbench.workloads.stats import main
from pagedbench.paths import ROOT, TEST_DATA

REPO = ROOT


def request(i, arrival, prompt_len, output_len):
    return Request(id=i, arrival_s=arrival, prompt_token_ids=tuple(range(prompt_len)), output_len=output_len)


def test_trace_stats_values():
    trace = [request(0, 0.0, 10, 1), request(1, 1.0, 20, 3), request(2, 4.0, 30, 5), request(3, 4.0, 100, 7)]
    stats = trace_stats(trace)
    assert stats["count"] == 4
    assert stats["prompt_mean"] == 40.0 and stats["prompt_p50"] == 25.0 and stats["prompt_max"] == 100
    assert stats["output_mean"] == 4.0 and stats["output_max"] == 7
    assert stats["prompt_tokens"] == 160 and stats["output_tokens"] == 16 and stats["total_tokens"] == 176
    assert stats["duration_s"] == 4.0 and stats["offered_rate"] == 0.75


def test_offline_rate_is_infinite():
    stats = trace_stats([request(0, 0.0, 5, 5), request(1, 0.0, 5, 5)])
    assert stats["duration_s"] == 0.0 and math.isinf(stats["offered_rate"])
    assert "offline" in format_stats(stats, "x")


def test_trace_stats_needs_requests():
    with pytest.raises(ValueError, match="at least one request"):
        trace_stats([])


def test_format_stats_is_a_few_lines():
    text = format_stats(trace_stats([request(0, 0.0, 10, 4), request(1, 2.0, 30, 8)]), "demo")
    lines = text.splitlines()
    assert lines[0].startswith("demo: 2 requests, 52 tokens")
    assert "mean    20.00" in lines[1] and "mean     6.00" in lines[2]
    assert "offered 0.500 req/s" in lines[3] and len(lines) == 4


def test_command_prints_stats(capsys):
    assert main(["synthetic", "num_requests=50", "arrival=poisson", "request_rate=2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("synthetic: 50 requests") and "req/s" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["synthetic", "bogus=1"], "unknown workload key 'bogus'"),
        (["synthetic", "arrival=poisson"], "finite request_rate"),
        (["nosuch"], "no workload config 'nosuch'"),
        ([], "usage"),
    ],
)
def test_command_errors_are_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_command_reports_distinct_pairs_of_a_resampled_trace(capsys, data_dir):
    path = data_dir / "alpaca_small.json"
    assert main(["alpaca", f"path={path}", "num_requests=10"]) == 0
    assert "10 requests (3 distinct pairs)" in capsys.readouterr().out


def test_runs_as_a_module(cache_dir):
    env = dict(os.environ, PAGEDBENCH_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-m", "pagedbench.workloads.stats", "alpaca", "num_requests=20"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("alpaca_synthetic: 20 requests")
    assert "RuntimeWarning" not in done.stderr


def test_stats_of_sampling_and_shared_prefixes():
    trace = [Request(0, 0.0, (1, 2, 3, 4), 2, n=4, prefix_id=0, prefix_len=3),
             Request(1, 1.0, (1, 2, 3, 5, 6), 2, prefix_id=0, prefix_len=3),
             Request(2, 2.0, (7, 8, 9), 2, prefix_id=1, prefix_len=1), request(3, 3.0, 5, 2)]
    stats = trace_stats(trace)
    assert (stats["n_max"], stats["beam_width_max"]) == (4, 1)
    assert (stats["prefixed"], stats["distinct_prefixes"], stats["prefix_len_mean"]) == (3, 2, pytest.approx(7 / 3))
    lines = format_stats(stats, "x").splitlines()
    assert "n up to 4, beam width up to 1" in lines[3]
    assert "3 requests share 2 prefix(es) of 2.3 tokens" in lines[4] and len(lines) == 6


@pytest.mark.parametrize("argv, first_line", [
    (["translation", "num_shots=5", "num_requests=30"], "translation_5shot: 30 requests"),
    (["chat", f"path={TEST_DATA / 'sharegpt_small.json'}", "num_requests=4"],
     "chat: 4 requests"),
])
def test_command_prints_the_new_workloads(capsys, argv, first_line):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith(first_line)
    if argv[0] == "translation":
        assert "30 requests share 1 prefix(es) of 341.0 tokens" in out
