"""Results files are written without following what was planted in their place (issue 57,
item 3): a link named like a results file is replaced, its target untouched; a directory,
FIFO or device in its place is an error that says so, never a hang; what a report embeds is
read the same way, its secrets redacted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tpot_locust.common.results_files import make_folder, open_for_writing, write_file
from tpot_locust.report.report_files import shown_scenario


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the results folder a planted link points at."""
    target = tmp_path / "authorized_keys"
    target.write_text("ssh-ed25519 AAAA keep me\n")
    return target


def planted(folder: Path, name: str, target: Path) -> Path:
    folder.mkdir(exist_ok=True)
    link = folder / name
    link.symlink_to(target)
    return link


def test_a_whole_file_replaces_a_link_and_leaves_its_target(tmp_path: Path, outside: Path) -> None:
    link = planted(tmp_path / "out", "report.html", outside)
    write_file(link, "<html>ours</html>")
    assert outside.read_text() == "ssh-ed25519 AAAA keep me\n"
    assert not link.is_symlink() and link.read_text() == "<html>ours</html>"
    umask = os.umask(0o022)
    os.umask(umask)
    assert link.stat().st_mode & 0o777 == 0o666 & ~umask  # as a plain write makes it
    assert [p.name for p in link.parent.iterdir()] == ["report.html"]  # no temporary left


@pytest.mark.parametrize("mode", ["w", "a"])
def test_a_file_written_as_the_run_goes_replaces_a_link(
    tmp_path: Path, outside: Path, mode: str
) -> None:
    link = planted(tmp_path / "out", "truth.jsonl", outside)
    with open_for_writing(link, mode) as handle:  # type: ignore[arg-type]
        handle.write("{}\n")
    assert outside.read_text() == "ssh-ed25519 AAAA keep me\n"
    assert not link.is_symlink() and link.read_text() == "{}\n"


def test_appending_keeps_what_a_regular_file_held(tmp_path: Path) -> None:
    path = tmp_path / "server_metrics.jsonl"
    path.write_text("first\n")
    with open_for_writing(path, "a") as handle:
        handle.write("second\n")
        assert handle.name == str(path)  # an error names the file, not a descriptor
    assert path.read_text() == "first\nsecond\n"


def test_a_link_in_place_of_a_folder_of_ours_is_replaced(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = planted(tmp_path / "out", "histograms", elsewhere)
    make_folder(link)
    write_file(link / "tpot.hlog", "x")
    assert link.is_dir() and not link.is_symlink() and not any(elsewhere.iterdir())


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_directory_or_fifo_in_its_place_is_an_error_not_a_hang(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "truth.jsonl"
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    for write in (lambda: write_file(path, "x"), lambda: open_for_writing(path)):
        with pytest.raises(OSError, match="cannot write the results file"):
            write()


def test_a_report_embeds_no_linked_scenario_and_redacts_a_hand_placed_one(
    tmp_path: Path, outside: Path
) -> None:
    link = planted(tmp_path / "out", "scenario.yaml", outside)
    assert shown_scenario(link) is None  # a private key is never embedded
    placed = tmp_path / "placed.yaml"
    placed.write_text(
        "# s.yaml as run\n# token: sk-in-a-comment\n"
        "server:\n  headers: {Authorization: Bearer sk-secret-123}\nduration: 5s\n"
    )
    shown = shown_scenario(placed)
    assert shown is not None and shown.startswith("# s.yaml as run\n") and "duration: 5s" in shown
    assert "sk-secret-123" not in shown and "sk-in-a-comment" not in shown
    placed.write_text("a: [unclosed\n")
    assert shown_scenario(placed) is None


def test_a_full_disk_stops_the_interval_logs_and_says_which(tmp_path: Path) -> None:
    """ENOSPC while a run writes its interval logs (``/dev/full``, a real full device): the
    logs stop with the error kept for the run's ``report_error``; the totals go on."""
    import time

    import numpy as np

    from tpot_locust.common.results_folder import ResultsFolder
    from tpot_locust.metrics.collector import IntervalLogs
    from tpot_locust.metrics.histograms import record_many
    from tpot_locust.metrics.metric_set import MetricSet

    now = time.time()
    logs = IntervalLogs(ResultsFolder(tmp_path), now)
    logs.files["tpot"].close()
    logs.files["tpot"] = open("/dev/full", "w")  # noqa: SIM115 - closed by the logs
    interval = MetricSet()
    for name in ("tpot", "itl"):
        record_many(interval.for_group("a").histogram(name), np.arange(1_000, 2_000))
    record_many(interval.for_group("b").histogram("tpot"), np.arange(1_000, 2_000))
    logs.write(interval.combined(), now, now + 1)
    assert logs.error is not None and "No space left on device" in logs.error
    assert logs.files == {} and logs.class_files == {}
    logs.write(interval.combined(), now + 1, now + 2)  # nothing more, no error raised
    logs.write_classes(interval.by_class(), now + 1, now + 2)
    assert logs.class_files == {}


def test_a_reused_folders_last_results_are_cleared_never_what_a_link_points_at(
    tmp_path: Path, outside: Path
) -> None:
    """A reused ``--out``: the last run's histograms, summary and workers' records go before
    this run starts (a crash would have rebuilt this run from them too); links go, their
    targets stay; a killed writer's temporary files go."""
    from tpot_locust.common.results_files import clear_results, clear_temporaries

    out = tmp_path / "out"
    (out / "workers").mkdir(parents=True)
    (out / "workers" / "old-worker.json").write_text("{}")
    (out / "summary.json").write_text("{}")
    planted(out, "histograms.json", outside)
    (out / ".summary.json.abc123.tmp").write_text("half")
    (out / "keep.txt").write_text("the user's")
    clear_results(out / "histograms.json", out / "summary.json", out / "workers")
    clear_temporaries(out)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert outside.read_text() == "ssh-ed25519 AAAA keep me\n"
