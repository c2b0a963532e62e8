"""The `pagedbench` command: vLLM's bench flags mapped onto a run's overrides, and the package installed whole
(a wheel in a fresh venv, run from a directory outside the checkout)."""
import argparse
import json
import math
import os
from pathlib import Path
import re
import shutil
import site
import subprocess
import sys

import pytest

from pagedbench.cli import BENCH_DIR, bench_overrides, bench_parser, main, result_filename
from pagedbench.paths import ROOT

STAMP = "20261203-101010"


def overrides(*flags: str) -> list[str]:
    parser = bench_parser()
    return bench_overrides(parser.parse_args(list(flags)), parser, STAMP)


def test_the_common_vllm_flags_map_onto_a_run_with_backend_http():
    out = overrides("--base-url", "http://10.0.0.2:9000", "--model", "org/m", "--num-prompts", "50",
                    "--request-rate", "4", "--max-concurrency", "8", "--metric-percentiles", "50,99.9",
                    "--goodput", "ttft:250", "tpot:40", "--save-detailed", "--seed", "3")
    assert out[:5] == ["backend=http", "backend.url=http://10.0.0.2:9000", "backend.endpoint=completions",
                       "workload.seed=3", f"hydra.run.dir={BENCH_DIR}/{STAMP}"]
    for expected in ("backend.model='org/m'", "backend.read_timeout_s=21600", "workload.num_requests=50", "workload.arrival=poisson",
                     "workload.request_rate=4", "backend.max_concurrency=8", "measure.percentiles=[50,99.9]",
                     "measure.slo.ttft_s=0.25", "measure.slo.tpot_s=0.04", "measure.slo.e2e_latency_s=null",
                     "measure.vllm_detailed=true", "workload=synthetic",
                     "+workload.prompt_dist={kind:fixed,value:1024}", "+workload.output_dist={kind:fixed,value:128}"):
        assert expected in out, expected
    assert out.index("~workload.prompt_dist") < out.index("+workload.prompt_dist={kind:fixed,value:1024}")


def test_defaults_as_vllms_rate_inf_no_goodput_and_the_chat_endpoint():
    out = overrides("--host", "localhost", "--port", "8123", "--backend", "openai-chat")
    assert "backend.url=http://localhost:8123" in out and "backend.endpoint=chat" in out
    assert "backend.tokenizer=cl100k_base" in out           # chat sends text: decoded with the trace's tokenizer
    assert "workload.arrival=offline" in out and not any(o.startswith("workload.request_rate") for o in out)
    assert {"measure.slo.ttft_s=null", "measure.slo.tpot_s=null"} <= set(out)   # request_goodput null
    assert "backend.max_concurrency" not in " ".join(out) and "measure.percentiles" not in " ".join(out)
    gamma = overrides("--request-rate", "2.5", "--burstiness", "0.5")
    assert {"workload.arrival=gamma", "workload.request_rate=2.5", "workload.burstiness=0.5"} <= set(gamma)
    spread = overrides("--input-len", "100", "--output-len", "10", "--random-range-ratio", "0.5")
    assert {"+workload.prompt_dist={kind:uniform,low:50,high:150}",
            "+workload.output_dist={kind:uniform,low:5,high:15}"} <= set(spread)
    sharegpt = overrides("--dataset-name", "sharegpt", "--dataset-path", "/d/sg.json", "--tokenizer", "hf:/tok")
    assert {"workload=sharegpt", "workload.path=/d/sg.json", "workload.tokenizer=hf:/tok",
            "backend.tokenizer=hf:/tok"} <= set(sharegpt)


@pytest.mark.parametrize("flags, message", [
    (["--goodput", "itl:5"], "the key must be one of ttft, tpot, e2el"),
    (["--goodput", "ttft:fast"], "the value must be milliseconds"),
    (["--goodput", "ttft:0"], "--goodput ttft must be > 0"),
    (["--request-rate", "0"], "--request-rate must be > 0"),
    (["--max-concurrency", "0"], "--max-concurrency must be > 0"),
    (["--random-range-ratio", "1"], "--random-range-ratio must be < 1"),
    (["--metric-percentiles", "50,x"], "comma-separated numbers"),
    (["--metric-percentiles", "0,50"], "must lie in (0, 100]"),
    (["--percentile-metrics", "ttft,goodput"], "unknown ['goodput']"),
    (["--dataset-path", "/d.json"], "--dataset-path is for --dataset-name sharegpt"),
    (["--dataset-name", "sharegpt", "--output-len", "8"], "keeps each conversation's lengths"),
])
def test_bad_flags_are_one_clear_error(flags, message, capsys):
    with pytest.raises(SystemExit) as done:
        overrides(*flags)
    assert done.value.code == 2 and message in capsys.readouterr().err


def test_the_result_file_is_named_as_vllm_names_it():
    parser = bench_parser()
    args = parser.parse_args(["--request-rate", "4", "--max-concurrency", "8"])
    assert result_filename(args, "org/opt-13b", STAMP) == f"openai-4qps-concurrency8-opt-13b-{STAMP}.json"
    args = parser.parse_args(["--label", "mine"])
    assert result_filename(args, None, STAMP) == f"mine-infqps-model-{STAMP}.json"


def test_usage_and_unknown_commands(capsys):
    assert main([]) == 2 and "pagedbench bench --base-url" in capsys.readouterr().err
    assert main(["--help"]) == 0 and "vllm bench serve" in capsys.readouterr().out
    assert main(["frobnicate"]) == 2 and "unknown command 'frobnicate'" in capsys.readouterr().err


def test_run_hands_its_arguments_to_run_py(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pagedbench", "run", "backend=sim", "model=opt-13b",
                           "workload.num_requests=10", "progress=false", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["num_finished"] == 10
    bad = subprocess.run([sys.executable, "-m", "pagedbench", "run", "backend=sim", "engine=nope"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "engine=nope" in bad.stderr


def _fresh_venv(tmp_path: Path) -> Path:
    """A venv outside the checkout holding pagedbench's wheel; the dependencies (torch, ...) are this
    environment's, reached through a .pth line (its own .pth files, this checkout's editable install among
    them, are not run), so nothing is downloaded."""
    source, wheels = tmp_path / "source", tmp_path / "wheels"     # built from a copy: the checkout stays clean
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(source)], check=True, capture_output=True, timeout=600)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    wheel = next(wheels.glob("pagedbench-*.whl"))
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True, timeout=600)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


@pytest.mark.slow
def test_an_installed_pagedbench_runs_serves_and_benchmarks_outside_the_checkout(tmp_path):
    venv = _fresh_venv(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import pagedbench.engines as engines, "
                            "pagedbench.run, pagedbench.paths as paths, pagedbench.kernels.ops as ops; "
                            "print(engines.__file__, paths.CONF.is_dir(), paths.CHECKOUT, ops.resolve('auto', 'cpu'))"],
                           cwd=work, env={**env, "PAGEDBENCH_KERNEL_CACHE": str(tmp_path / "kernels")},
                           capture_output=True, text=True, check=True).stdout.split()
    # the wheel's, with conf/ and the native CPU kernels' C source (built here into a fresh cache)
    assert where[0].startswith(str(venv)) and where[1:] == ["True", "False", "cpu"]
    pagedbench = str(venv / "bin" / "pagedbench")
    done = subprocess.run([pagedbench, "run", "backend=sim", "model=opt-13b", "workload.num_requests=10",
                           "progress=false"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    [summary] = (work / "outputs" / "runs").glob("*/*/summary.json")
    assert json.loads(summary.read_text())["num_finished"] == 10
    server = subprocess.Popen([pagedbench, "serve", "engine=paged", "model=tiny", "serve.port=0"], cwd=work,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        for line in server.stdout:
            found = re.search(r"serving \S+ on (http://\S+)", line)
            if found:
                url = found.group(1)
                break
        assert url, "the server never said where it serves"
        done = subprocess.run([pagedbench, "bench", "--base-url", url, "--num-prompts", "4", "--input-len", "8",
                               "--output-len", "4", "--max-concurrency", "2", "--save-result", "--result-dir",
                               "results", "--", "progress=false"], cwd=work, env=env, capture_output=True,
                              text=True, timeout=300)
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    [saved] = (work / "results").glob("openai-infqps-concurrency2-*.json")
    result = json.loads(saved.read_text())
    assert (result["completed"], result["failed"], result["max_concurrency"]) == (4, 0, 2)
    assert result["total_output_tokens"] == 16 and result["endpoint_type"] == "http"
    assert math.isfinite(result["mean_ttft_ms"]) and len(result["queue_times"]) == 4


def test_vllms_other_bench_flags_are_in_the_help_and_map_onto_the_run(capsys):
    with pytest.raises(SystemExit):
        bench_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    for flag in ("--header", "--extra-body", "--temperature", "--top-p", "--top-k", "--min-p", "--num-warmups",
                 "--ramp-up-strategy", "--ramp-up-start-rps", "--ramp-up-end-rps", "--metadata", "--append-result",
                 "--served-model-name", "--ready-check-timeout-sec"):
        assert flag in text, flag
    out = overrides("--model", "m", "--served-model-name", "served", "--header", "X-Team=a b", "X-Run=7",
                    "--extra-body", '{"stop": ["\\n"], "seed": 3}', "--top-p", "0.9", "--top-k", "20",
                    "--temperature", "0.7", "--num-warmups", "2")
    assert "backend.model='served'" in out
    assert "backend.headers={X-Team:'a b',X-Run:'7'}" in out
    assert "backend.extra_body={stop:['\n'],seed:3,top_p:0.9,top_k:20}" in out
    assert {"backend.temperature=0.7", "backend.warmup_requests=2", "backend.read_timeout_s=21600"} <= set(out)


@pytest.mark.parametrize("flags, message", [
    (["--extra-body", "[1]"], "--extra-body must be a JSON object"),
    (["--extra-body", "{oops"], "--extra-body is not JSON"),
    (["--header", "novalue"], "--header 'novalue': write KEY=VALUE"),
    (["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1"], "--ramp-up-strategy needs --ramp-up-end-rps"),
    (["--temperature", "-1"], "--temperature must be >= 0"),
])
def test_bad_new_flags_are_named(flags, message, capsys):
    with pytest.raises(SystemExit):
        overrides(*flags)
    assert message in capsys.readouterr().err


def test_a_ramp_goes_from_start_to_end_rps():
    from pagedbench.bench import ramp_rates

    assert ramp_rates("linear", 1, 5, 5) == [1, 2, 3, 4, 5]
    assert ramp_rates("exponential", 1, 16, 5) == pytest.approx([1, 2, 4, 8, 16])
    assert ramp_rates("linear", 3, 9, 1) == [3]


def test_a_ramped_queue_is_the_run_s_draw_with_ramped_arrivals(tmp_path):
    from pagedbench.bench import ramp_trace
    from pagedbench.workloads.trace_file import read_trace

    flags = ["--num-prompts", "40", "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1",
             "--ramp-up-end-rps", "50", "--input-len", "20", "--output-len", "5"]
    parser = bench_parser()
    args = parser.parse_args(flags)
    extra = ramp_trace(args, bench_overrides(args, parser, STAMP), [], tmp_path / "ramp.jsonl")
    assert extra == ["workload=trace", f"workload.path={(tmp_path / 'ramp.jsonl').resolve()}"]
    rows = read_trace(tmp_path / "ramp.jsonl")
    gaps = rows["arrival_s"].diff().dropna().tolist()
    assert len(rows) == 40 and rows["arrival_s"].iloc[0] == 0 and all(g >= 0 for g in gaps)
    assert sum(gaps[:10]) > sum(gaps[-10:])   # the rate rises: early gaps are longer
    assert set(rows["prompt_len"]) == {20} and "prompt_token_ids" in rows   # the draw's own prompts


def test_a_saved_result_carries_the_metadata_and_appends_as_a_line(tmp_path):
    from pagedbench.bench import save_result

    result = tmp_path / "vllm_result.json"
    result.write_text(json.dumps({"completed": 3}))
    dest = tmp_path / "out" / "r.json"
    save_result(result, dest, {"team": "a"}, append=False)
    save_result(result, dest, {"team": "b"}, append=True)
    lines = dest.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"completed": 3, "team": "a"}, {"completed": 3, "team": "b"}]
    save_result(result, dest, {}, append=False)
    assert json.loads(dest.read_text()) == {"completed": 3}


def test_the_console_block_is_read_from_the_result_json():
    from pagedbench.bench import result_block

    text = result_block({"completed": 5, "duration": 2.5, "output_throughput": 80.0, "mean_ttft_ms": 12.5,
                         "median_ttft_ms": 11.0, "p99_ttft_ms": 30.0})
    assert "Successful requests:" in text and "Mean TTFT (ms):" in text and "12.50" in text
    assert "P99 TTFT (ms):" in text and "30.00" in text and "TPOT" not in text


def test_a_server_that_never_answers_is_named_within_the_ready_check():
    from pagedbench.bench import wait_ready

    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # bound, never listening: connections are refused
        problem = wait_ready(f"http://127.0.0.1:{port}", {}, 1)
    assert problem and "did not answer GET /v1/models within 1 s" in problem
