"""docs/grafana/pagedbench.json against the server: every panel's query names a series /metrics exports, with the
`model_name` label the dashboard filters on, and its model variable finds the served name."""
import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pagedbench.engines.real.build import build_real
from pagedbench.engines.serving.asgi_server import EngineService, build_app
from pagedbench.paths import ROOT
from tests.serving.test_asgi_server import BACKEND, ENGINES, LIMITS, PROMPT, SPEC, loaded  # noqa: F401 (fixture)

DASHBOARD = ROOT / "docs" / "grafana" / "pagedbench.json"
SERIES = re.compile(r"\b((?:vllm|pagedbench):[a-z0-9_]+)")


def queries() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels for t in p["targets"]]


@pytest.fixture(scope="module")
def exported(loaded):
    """Every sample /metrics writes after a few requests: name -> the label sets it carries."""
    from starlette.testclient import TestClient

    backend = build_real(BACKEND, SPEC, ENGINES["paged"], LIMITS, loaded=loaded)
    service = EngineService(backend, SPEC.name, "paged", "cl100k_base", max_seq_len=LIMITS.max_seq_len,
                            served_model_names=["opt-test"])
    with TestClient(build_app(service)) as client:
        for n in (2, 4):
            assert client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": n}).status_code == 200
        text = client.get("/metrics").text
    out: dict[str, list[dict]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample.labels)
    return out


def test_the_dashboard_has_vllms_panels_and_ours():
    titles = {title for title, _ in queries()}
    assert len(json.loads(DASHBOARD.read_text())["panels"]) == 14
    assert {"E2E Request Latency", "Token Throughput", "Scheduler State", "Time To First Token Latency",
            "Cache Utilization", "Finish Reason", "KV Cache Split (pagedbench)"} <= titles


@pytest.mark.parametrize("title, expr", queries(), ids=lambda v: v if len(v) < 40 else None)
def test_every_query_names_a_series_the_server_exports_under_the_model_name(exported, title, expr):
    names = SERIES.findall(expr)
    assert names, f"{title}: no series in {expr!r}"
    assert 'model_name="$model_name"' in expr
    for name in names:
        assert name in exported, f"{title}: {name} is not exported"
        assert all(labels.get("model_name") == "opt-test" and labels.get("engine") == "paged"
                   for labels in exported[name]), name
        if name.endswith(("_bucket", "_sum", "_count")) or "request_success" in name:
            assert any(s for s in exported[name]), name


def test_the_model_variable_reads_the_label_every_vllm_series_has(exported):
    variable = next(v for v in json.loads(DASHBOARD.read_text())["templating"]["list"] if v["name"] == "model_name")
    assert variable["query"]["query"] == 'label_values({__name__=~"vllm:.*"},model_name)'
    vllm = [labels for name, sets in exported.items() if name.startswith("vllm:") for labels in sets]
    assert vllm and {labels["model_name"] for labels in vllm} == {"opt-test"}
