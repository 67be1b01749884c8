"""docker-compose and Kubernetes files are well formed and their health checks work.

No Docker engine or cluster runs here; the files are parsed and the health-check command
they all use is run for real against the simulator.
"""

from __future__ import annotations

import sys

import yaml

from tests.conftest import ROOT, run_command
from tests.helpers.distributed import free_port
from tpot_locust.sim.process import start_simulator


def test_compose_has_sim_master_worker_with_healthchecks() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"sim", "master", "worker"}
    for name, service in services.items():
        assert "tpot_locust.healthcheck" in service["healthcheck"]["test"], name
    # published on this machine only (issue 25): the web UI can start tests against any host
    assert services["master"]["ports"] == ["127.0.0.1:8089:8089"]
    assert services["sim"]["ports"] == ["127.0.0.1:8000:8000"]
    assert "--master" in services["master"]["command"]
    assert "--worker" in services["worker"]["command"]
    assert "${TPOT_HOST:-http://sim:8000}" in services["master"]["command"]
    assert services["worker"]["depends_on"]["master"]["condition"] == "service_healthy"


def test_kubernetes_master_service_and_scalable_workers() -> None:
    documents = list(yaml.safe_load_all((ROOT / "deploy/kubernetes/tpot-locust.yaml").read_text()))
    kinds = {(d["kind"], d["metadata"]["name"]) for d in documents}
    assert ("Deployment", "tpot-locust-master") in kinds
    assert ("Service", "tpot-locust-master") in kinds
    assert ("Deployment", "tpot-locust-worker") in kinds
    service = next(d for d in documents if d["kind"] == "Service")
    assert service["spec"]["type"] == "ClusterIP"  # the web UI stays inside the cluster
    worker = next(d for d in documents if d["metadata"]["name"] == "tpot-locust-worker")
    assert worker["spec"]["replicas"] >= 1
    assert "--worker" in worker["spec"]["template"]["spec"]["containers"][0]["command"][-1]


def test_healthcheck_command() -> None:
    module = [sys.executable, "-m", "tpot_locust.healthcheck"]
    with start_simulator() as sim:
        assert run_command([*module, f"{sim.url}/health"], timeout=30).returncode == 0
        assert run_command([*module, f"127.0.0.1:{sim.port}"], timeout=30).returncode == 0
    assert run_command([*module, f"127.0.0.1:{free_port()}"], timeout=30).returncode == 1
