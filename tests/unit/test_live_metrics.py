"""The live Prometheus page, read back with prometheus_client's own parser."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.metrics.histograms import histogram_stats, record_many
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.live_metrics import EXPORTED_METRICS, LiveFacts, buckets_s, render


def _totals() -> tuple[MetricSet, dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    totals = MetricSet()
    values: dict[str, np.ndarray] = {}
    for name, scale in (("chat", 1.0), ("burst", 3.0)):
        metrics = totals.for_group(name)
        metrics.counters.ok, metrics.counters.failed = 40, 2
        metrics.counters.errors["http_5xx"] = 2
        metrics.counters.output_tokens = metrics.counters.arrived_tokens = 5_000
        sample = np.round(rng.lognormal(np.log(1_500 * scale), 0.8, 20_000)).astype(np.int64)
        values[name] = sample
        for metric in EXPORTED_METRICS:
            record_many(metrics.histogram(metric), sample)
    totals.client.stalls, totals.client.stalled_ns = 3, 45_000_000
    totals.client.watched_ns = 9_000_000_000
    totals.client.cpu_ns = 2_500_000_000
    return totals, values


def _samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Each sample by name and labels, as Prometheus stores them (an empty label is none)."""
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if v))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def test_every_exported_metric_has_buckets_counts_and_percentiles() -> None:
    totals, values = _totals()
    page = _samples(render(totals, LiveFacts(running=True, users=8, tokens_per_s=812.5)))
    assert set(EXPORTED_METRICS) == {"tpot", "itl", "request_tpot", "ttft", "e2e"}
    for metric in EXPORTED_METRICS:
        base = f"tpot_locust_{metric}_seconds"
        for label in ("chat", "burst", "all"):
            histogram = (totals.combined() if label == "all" else totals.classes[label]).histogram(
                metric
            )
            stats = histogram_stats(histogram)
            assert page[(f"{base}_count", (("user_class", label),))] == stats.count
            for percentile, value_us in stats.percentiles.items():
                key = (("quantile", f"{percentile / 100:g}"), ("user_class", label))
                assert page[(f"tpot_locust_{metric}_quantile_seconds", key)] == pytest.approx(
                    value_us / 1e6
                )
        # buckets: cumulative, exact where HDR buckets are 1 us wide (below 2.048 ms)
        sample = values["chat"]
        last = 0.0
        for bound in buckets_s(metric):
            count = page[(f"{base}_bucket", (("le", f"{bound:g}"), ("user_class", "chat")))]
            assert count >= last
            last = count
            exact = int(np.count_nonzero(sample <= round(bound * 1e6)))
            if bound < 0.002:
                assert count == exact, (metric, bound)
            else:
                assert exact <= count <= np.count_nonzero(sample <= bound * 1e6 * 1.001)
    assert page[("tpot_locust_requests_total", (("outcome", "ok"), ("user_class", "all")))] == 80
    assert (
        page[
            ("tpot_locust_request_errors_total", (("category", "http_5xx"), ("user_class", "chat")))
        ]
        == 2
    )
    assert page[("tpot_locust_client_stalls_total", ())] == 3
    assert page[("tpot_locust_client_stalled_seconds_total", ())] == pytest.approx(0.045)
    assert page[("tpot_locust_client_watched_seconds_total", ())] == pytest.approx(9.0)
    assert page[("tpot_locust_client_cpu_seconds_total", ())] == pytest.approx(2.5)
    assert page[("tpot_locust_tokens_per_second", ())] == 812.5
    assert page[("tpot_locust_running", ())] == 1 and page[("tpot_locust_users", ())] == 8


def test_the_per_token_buckets_resolve_a_1_to_20_ms_tail() -> None:
    bounds = buckets_s("tpot")
    in_tail = [b for b in bounds if 0.001 <= b <= 0.020]
    assert len(in_tail) >= 20 and max(np.diff(in_tail)) <= 0.001 + 1e-12
    assert buckets_s("ttft")[0] >= 0.001 and buckets_s("e2e")[-1] >= 600
    assert all(catalogue.BY_NAME[m].exported for m in EXPORTED_METRICS)


def test_an_empty_run_renders_without_percentiles() -> None:
    page = _samples(render(MetricSet(), LiveFacts()))
    assert page[("tpot_locust_tpot_seconds_count", (("user_class", "all"),))] == 0
    assert not any(name.endswith("_quantile_seconds") for name, _ in page)
    assert ("tpot_locust_tokens_per_second", ()) not in page


def test_the_grafana_dashboard_reads_only_metrics_the_page_has() -> None:
    """deploy/grafana's dashboard: every series its queries name is on a real page."""
    import json
    import re
    from pathlib import Path

    totals, _ = _totals()
    names = {name for name, _ in _samples(render(totals, LiveFacts(True, 1, 1.0)))}
    names |= {
        family.name
        for family in text_string_to_metric_families(
            render(totals, LiveFacts(True, 1, 1.0)).decode()
        )
    }
    path = Path(__file__).resolve().parents[2] / "deploy/grafana/tpot-locust-dashboard.json"
    dashboard = json.loads(path.read_text())
    queried = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            queried |= set(re.findall(r"\btpot_locust_[a-z0-9_]+", target["expr"]))
    assert queried and queried <= names, queried - names
    variable = dashboard["templating"]["list"][1]["query"]["query"]
    assert re.findall(r"\btpot_locust_[a-z0-9_]+", variable)[0] in names


def test_a_bare_port_listens_on_loopback_only() -> None:
    import argparse

    from tpot_locust.harness.run.metrics_endpoint import parse_address

    assert parse_address("9464") == ("127.0.0.1", 9464)
    assert parse_address("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_address("[::1]:9464") == ("::1", 9464)
    for bad in ("", ":9464", "x:0", "x:65536", "x:1.5", "a b:80", "http://x:80"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_address(bad)


def test_a_model_has_its_own_series_that_no_class_selector_adds_in() -> None:
    totals = MetricSet()
    for group, ok, gap_us in (
        ("chat@lora-a", 30, 2_000),
        ("chat@lora-b", 10, 9_000),
        ("batch@lora-b", 5, 4_000),
    ):
        metrics = totals.for_group(group)
        metrics.counters.ok = ok
        record_many(metrics.histogram("tpot"), np.full(ok, gap_us))
    page = _samples(render(totals, LiveFacts(running=True, users=3, tokens_per_s=None)))
    count = "tpot_locust_tpot_seconds_count"
    assert page[(count, (("model", "lora-b"),))] == 15  # across the classes that name it
    assert page[(count, (("model", "lora-a"),))] == 30
    assert page[(count, (("user_class", "chat"),))] == 40
    assert page[(count, (("user_class", "all"),))] == 45  # the models' series are not in it
    max_b = page[("tpot_locust_tpot_quantile_seconds", (("model", "lora-b"), ("quantile", "1")))]
    assert max_b == pytest.approx(0.009, rel=1e-3)
    ok = ("tpot_locust_requests_total", (("model", "lora-b"), ("outcome", "ok")))
    assert page[ok] == 15
    assert not any(
        dict(labels).get("model") for _, labels in page if ("user_class", "all") in labels
    )
