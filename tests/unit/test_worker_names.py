"""Workers are named by their host and an index, not Locust's client id (issue 46)."""

from __future__ import annotations

from tpot_locust.harness.run.worker_names import WorkerNames, host_of

UUID = "54b3b0e0a0cf455bb8525da11ee92103"


def test_a_worker_is_its_host_and_an_index_in_the_order_they_came() -> None:
    names = WorkerNames()
    assert names(f"gpu-node-7_{UUID}") == "gpu-node-7#1"
    assert names(f"gpu-node-7_{UUID[::-1]}") == "gpu-node-7#2"
    assert names(f"vm_{UUID}") == "vm#1"
    assert names(f"gpu-node-7_{UUID}") == "gpu-node-7#1"  # given once, kept
    assert names.ids()["gpu-node-7#2"] == f"gpu-node-7_{UUID[::-1]}"


def test_an_id_of_another_form_is_named_whole() -> None:
    assert host_of("worker_one") == "worker_one"  # no uuid after the last _
    assert host_of(f"_{UUID}") == f"_{UUID}"
    assert host_of(f"my_host_{UUID}") == "my_host"
