"""https stamped as http is: the client reads the ciphertext itself (``ssl.SSLObject``), so
kernel and segment stamps hold under TLS; ``server.tls`` trusts a cluster's own CA."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_command
from tests.helpers.truth_edges import sent_at_the_edges
from tests.process.test_kernel_stamps import held_reader_stamps, true_sends
from tpot_locust.common.clock import SEGMENT_CLOCK
from tpot_locust.common.errors import StreamError
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.common.tls import client_tls_context
from tpot_locust.metrics.histograms import exact_percentile
from tpot_locust.report.truth_check import true_samples_ms
from tpot_locust.sim.process import start_simulator
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.segment_stamps import arrival_clock

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl command")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=tpot-test",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def tls_simulator(certificate: tuple[Path, Path], truth: Path | None = None, *args: str):
    cert, key = certificate
    return start_simulator("--tls-cert", str(cert), "--tls-key", str(key), *args, truth=truth)


def test_https_tokens_carry_their_own_kernel_stamps(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    """A reader held 40 ms leaves tokens waiting: under TLS each still gets the arrival of
    the segment that completed its record (the clock a plain-http read would have)."""
    truth = tmp_path / "truth.jsonl"
    context = client_tls_context(str(certificate[0]))
    with tls_simulator(certificate, truth, "--gap-ms", "5", "--ttft-ms", "5") as sim:
        assert sim.url.startswith("https://")
        stamps, request_id = held_reader_stamps(sim.url, arrival_clock(), 40, context)
    errors_ms = [(s - t) / 1e6 for s, t in zip(stamps, true_sends(truth, request_id), strict=True)]
    if arrival_clock() == SEGMENT_CLOCK:
        assert all(-0.5 <= error <= 1.0 for error in errors_ms), errors_ms
    else:  # kernel stamps: the last token of each read is true (a held read shares one)
        assert -0.5 <= errors_ms[-1] <= 1.0, errors_ms


def test_a_self_signed_server_is_refused_unless_trusted(certificate: tuple[Path, Path]) -> None:
    with tls_simulator(certificate) as sim:
        origin = Origin.parse(sim.url)
        untrusted = HTTPConnection(origin)  # the system's CAs: not this one
        with pytest.raises(StreamError, match="CERTIFICATE_VERIFY_FAILED"):
            untrusted.request("GET", "/v1/models", {})
        for context in (
            client_tls_context(str(certificate[0])),
            client_tls_context(None, verify=False),
        ):
            connection = HTTPConnection(origin, tls_context=context)
            response, _ = connection.request("GET", "/v1/models", {})
            assert response.status == 200 and b"tpot-sim" in response.read()
            connection.close()


def test_a_run_over_https_matches_the_truth(
    tmp_path: Path, python: str, certificate: tuple[Path, Path]
) -> None:
    truth, out = tmp_path / "truth.jsonl", tmp_path / "out"
    scenario = tmp_path / "tls.yaml"
    with tls_simulator(certificate, truth, "--gap-ms", "3", "--ttft-ms", "20") as sim:
        scenario.write_text(
            f"name: tls\nduration: 6s\nspawn_rate: 8\nseed: 1\n"
            f"server: {{host: '{sim.url}', metrics: false, tls: {{ca: {certificate[0]}}}}}\n"
            "classes:\n  chat: {users: 8, prompt_tokens: 32, output_tokens: 100}\n"
        )
        result = run_command(
            [python, "-m", "tpot_locust", "run", str(scenario), "--out", str(out)], timeout=120
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["failed"] == 0 and summary["requests"]["ok"] >= 8
    assert summary["client"]["arrival_clocks"].keys() == {arrival_clock()}
    assert summary["client"]["read_delay_p99_ms"] is not None  # kernel-stamped reads
    true = true_samples_ms(truth, RunFacts.from_json(summary["run"]))["tpot"]
    tpot = summary["metrics"]["tpot"]
    edge = sent_at_the_edges(truth, summary["run"]["window_wall_ns"])  # stamped on arrival
    assert abs(tpot["count"] - true.size) <= edge, (tpot["count"], true.size, edge)
    for key, percentile in (("p50", 50.0), ("p90", 90.0), ("p99", 99.0)):
        assert abs(tpot[key] - exact_percentile(true, percentile)) <= 0.2, (key, tpot, true)
