import math

import pytest
from omegaconf import OmegaConf

from pagedbench.workloads import LengthDist, WorkloadConfig
from pagedbench.paths import CONF

CONF_DIR = CONF / "workload"


def test_defaults_are_vllm_benchmark_rules():
    cfg = WorkloadConfig(name="sharegpt")
    assert (cfg.num_requests, cfg.seed, cfg.min_len, cfg.max_prompt_len, cfg.max_total_len) == (1000, 0, 4, 1024, 2048)
    assert cfg.arrival == "offline" and cfg.request_rate == math.inf
    assert cfg.tokenizer == "cl100k_base"


def test_label_marks_synthetic_alpaca():
    assert WorkloadConfig(name="alpaca").label == "alpaca_synthetic"
    assert WorkloadConfig(name="alpaca", path="x.json").label == "alpaca"
    assert WorkloadConfig(name="sharegpt").label == "sharegpt"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": "wmt"}, r"one of \['sharegpt', 'alpaca', 'synthetic', 'trace', 'translation', 'chat'\]"),
        ({"name": "sharegpt", "arrival": "bursty"}, r"one of \['offline', 'poisson', 'gamma', 'trace'\]"),
        ({"name": "sharegpt", "num_requests": 0}, "num_requests must be >= 1"),
        ({"name": "sharegpt", "num_requests": -5}, "num_requests must be >= 1"),
        ({"name": "sharegpt", "num_requests": 2.5}, "num_requests must be an integer"),
        ({"name": "sharegpt", "num_requests": True}, "num_requests must be an integer"),
        ({"name": "sharegpt", "seed": -1}, "seed must be >= 0"),
        ({"name": "sharegpt", "min_len": 0}, "min_len must be >= 1"),
        ({"name": "sharegpt", "max_prompt_len": 3}, "max_prompt_len must be >= 4"),
        ({"name": "sharegpt", "max_total_len": 7}, "max_total_len must be >= 8"),
        ({"name": "sharegpt", "tokenizer": ""}, "tokenizer must be"),
        ({"name": "sharegpt", "tokenizer": "hf:"}, "tokenizer must be"),
        ({"name": "sharegpt", "path": ""}, "path must be a non-empty string"),
        ({"name": "synthetic", "path": "x.json"}, "reads no file"),
        ({"name": "sharegpt", "arrival": "poisson"}, "needs a finite request_rate > 0"),
        ({"name": "sharegpt", "arrival": "gamma", "request_rate": 0.0}, "needs a finite request_rate > 0"),
        ({"name": "sharegpt", "arrival": "poisson", "request_rate": -1.0}, "needs a finite request_rate > 0"),
        ({"name": "sharegpt", "request_rate": 2.0}, "would be ignored"),
        ({"name": "sharegpt", "request_rate": "fast"}, "request_rate must be a number"),
        ({"name": "sharegpt", "arrival": "poisson", "request_rate": 1.0, "burstiness": 0.5}, "only applies to arrival='gamma'"),
        ({"name": "sharegpt", "arrival": "gamma", "request_rate": 1.0, "burstiness": 0.0}, "burstiness must be finite and > 0"),
        ({"name": "synthetic", "prompt_dist": 5}, "prompt_dist must be a LengthDist"),
        ({"name": "sharegpt", "n": 0}, "n must be >= 1"),
        ({"name": "sharegpt", "n": 2.0}, "n must be an integer"),
        ({"name": "sharegpt", "beam_width": 0}, "beam_width must be >= 1"),
        ({"name": "sharegpt", "beam_width": True}, "beam_width must be an integer"),
        ({"name": "sharegpt", "n": 2, "beam_width": 4}, r"either parallel sampling \(n > 1\) or beam search"),
        ({"name": "sharegpt", "max_output_len": 3}, "max_output_len must be >= 4"),
        ({"name": "sharegpt", "max_output_len": 10.5}, "max_output_len must be an integer"),
        ({"name": "sharegpt", "num_shots": 1}, "num_shots=1 only applies to workload=translation"),
        ({"name": "translation", "num_shots": -1}, "num_shots must be >= 0"),
        ({"name": "translation", "num_shots": 1, "num_prefixes": 0}, "num_prefixes must be >= 1"),
        ({"name": "translation", "num_prefixes": 2}, "num_prefixes=2 needs shared prefixes"),
        ({"name": "chat", "num_prefixes": 2}, "num_prefixes=2 needs shared prefixes"),
        ({"name": "translation", "path": "wmt16.json"}, "translation workload reads no file"),
    ],
)
def test_invalid_configs_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WorkloadConfig(**kwargs)


def test_valid_arrival_configs():
    assert WorkloadConfig(name="sharegpt", arrival="poisson", request_rate=2).request_rate == 2.0
    assert WorkloadConfig(name="sharegpt", arrival="gamma", request_rate=2.0, burstiness=0.25).burstiness == 0.25


def test_from_dict_rejects_unknown_key_and_lists_valid_ones():
    with pytest.raises(ValueError, match=r"unknown workload key 'num_request'.*'num_requests'.*'burstiness'"):
        WorkloadConfig.from_dict({"name": "sharegpt", "num_request": 5})


def test_from_dict_needs_name():
    with pytest.raises(ValueError, match="needs a 'name'"):
        WorkloadConfig.from_dict({"num_requests": 5})


def test_from_dict_reads_none_and_yaml_inf_as_no_rate():
    assert WorkloadConfig.from_dict({"name": "sharegpt", "request_rate": None}).request_rate == math.inf
    yaml_cfg = OmegaConf.create("name: sharegpt\nrequest_rate: .inf\n")
    assert WorkloadConfig.from_dict(OmegaConf.to_container(yaml_cfg)).request_rate == math.inf


def test_from_dict_builds_nested_length_dists():
    cfg = WorkloadConfig.from_dict({
        "name": "synthetic",
        "prompt_dist": {"kind": "uniform", "low": 2, "high": 9},
        "output_dist": {"kind": "lognormal", "mean": 50.0, "sigma": 0.5},
    })
    assert cfg.prompt_dist == LengthDist(kind="uniform", low=2, high=9)
    assert cfg.output_dist.kind == "lognormal" and cfg.output_dist.mean == 50.0


def test_from_dict_rejects_unknown_nested_key():
    with pytest.raises(ValueError, match=r"unknown LengthDist key 'avg'.*'mean'"):
        WorkloadConfig.from_dict({"name": "synthetic", "prompt_dist": {"kind": "lognormal", "avg": 3}})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kind": "normal"}, r"one of \['fixed', 'uniform', 'lognormal'\]"),
        ({"kind": "fixed"}, "needs value >= 1"),
        ({"kind": "fixed", "value": 0}, "needs value >= 1"),
        ({"kind": "uniform", "low": 3}, "needs both low and high"),
        ({"kind": "uniform", "low": 9, "high": 3}, "1 <= low <= high"),
        ({"kind": "uniform", "low": 0, "high": 3}, "1 <= low <= high"),
        ({"kind": "lognormal", "sigma": 1.0}, "finite mean > 0"),
        ({"kind": "lognormal", "mean": 10.0, "sigma": -1.0}, "finite sigma >= 0"),
    ],
)
def test_invalid_length_dists(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LengthDist(**kwargs)


@pytest.mark.parametrize("name", ["sharegpt", "alpaca", "synthetic", "translation", "chat"])
def test_every_workload_yaml_builds_a_config(name):
    container = OmegaConf.to_container(OmegaConf.load(CONF_DIR / f"{name}.yaml"), resolve=True)
    cfg = WorkloadConfig.from_dict(container)
    assert cfg.name == name
    assert cfg.seed == 0 and cfg.arrival == "offline" and cfg.request_rate == math.inf
    assert cfg.n == 1 and cfg.beam_width == 1
    if name == "sharegpt":
        assert cfg.num_requests == 1000
    if name == "translation":
        assert (cfg.num_shots, cfg.num_prefixes, cfg.path) == (1, 1, None)
    if name == "chat":   # the paper's Figure 17: last 1024 prompt tokens, at most 1024 generated
        assert (cfg.max_prompt_len, cfg.max_output_len, cfg.path) == (1024, 1024, None)
    else:
        assert cfg.max_output_len is None


@pytest.mark.parametrize("name", ["sharegpt", "alpaca", "synthetic", "trace", "translation", "chat"])
def test_every_workload_yaml_states_the_sampling_fields(name):
    text = (CONF_DIR / f"{name}.yaml").read_text()
    assert "\nn: 1 " in text and "\nbeam_width: 1 " in text


def test_sampling_and_prefix_defaults():
    cfg = WorkloadConfig(name="sharegpt")
    assert (cfg.n, cfg.beam_width, cfg.num_shots, cfg.num_prefixes, cfg.max_output_len) == (1, 1, 0, 1, None)
    assert WorkloadConfig(name="alpaca", beam_width=6).beam_width == 6
    assert WorkloadConfig(name="translation", num_shots=5, num_prefixes=4).num_prefixes == 4
