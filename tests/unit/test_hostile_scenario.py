"""Hostile scenario input (issue 25): each input gets a clear ``ScenarioError`` naming the
file and line (or the option), within a bounded time and memory; never a traceback, a hang
or a value that wedges the run later (NaN, infinity, a 400-digit integer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tpot_locust.common.bounded_files import (
    DATA_FILE_MAX_BYTES,
    LINE_MAX_BYTES,
    BoundedFileError,
    read_lines,
    read_text,
)
from tpot_locust.common.distributions import (
    MAX_VALUE,
    DistributionError,
    Fixed,
    parse_distribution,
    sample_int,
)
from tpot_locust.scenario.datasets import load_dataset
from tpot_locust.scenario.loader import load_scenario, scenario_document
from tpot_locust.scenario.trace import load_trace
from tpot_locust.scenario.value_checks import parse_duration
from tpot_locust.scenario.yaml_source import MAX_PROBLEMS, ScenarioError, parse_located
from tpot_locust.wire.http_client import Origin

BASE = "duration: 2s\nclasses:\n  chat:\n    users: 1\n"
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


def scenario(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


def refused(path: Path, overrides: list[str] | None = None) -> str:
    """The message of the ScenarioError loading ``path`` raises (it must raise one)."""
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path, overrides)
    return str(raised.value)


# --- item 5 and 11: every number finite and in range -------------------------------------


@pytest.mark.parametrize(
    ("line", "where", "message"),
    [
        ("think_time: .nan", "classes.chat.think_time", "finite"),
        ("think_time: .inf", "classes.chat.think_time", "finite"),
        ("wait_time: .inf", "classes.chat.wait_time", "finite"),
        ("output_tokens: 1" + "0" * 400, "classes.chat.output_tokens", f"<= {MAX_VALUE:,}"),
        ("prompt_tokens: {dist: uniform, min: 1, max: .inf}", "prompt_tokens.max", "finite"),
        ("output_tokens: {dist: normal, mean: .nan, stddev: 1}", "output_tokens.mean", "finite"),
        ("turns: 1" + "0" * 400, "classes.chat.turns", "must be <= 1,000,000"),
        ("shared_prefix_tokens: 100000000", "shared_prefix_tokens", "<= 10,000,000"),
        ("max_in_flight: 1" + "0" * 400, "classes.chat.max_in_flight", "<= 1,000,000"),
    ],
)
def test_class_numbers_are_finite_and_bounded(
    tmp_path: Path, line: str, where: str, message: str
) -> None:
    text = refused(scenario(tmp_path, BASE + f"    {line}\n"))
    assert ":5:" in text and where in text and message in text, text


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("duration=.inf", "duration: must be"),
        ("duration=1" + "0" * 400, "duration: must be <= 30 days"),
        ("duration=99999999h", "duration: must be <= 30 days"),
        ("warmup=.nan", "warmup: must be a number, not NaN"),
        ("server.timeouts.total=.inf", "server.timeouts.total: must be a finite number"),
        ("server.timeouts.first_token=.nan", "first_token: must be a finite number"),
        ("server.timeouts.idle=.inf", "server.timeouts.idle: must be a finite number"),
        ("classes.chat.users=1" + "0" * 400, "classes.chat.users: must be <= 1,000,000"),
        ("spawn_rate=.nan", "spawn_rate: must be a finite number"),
        ("seed=1" + "0" * 30, "seed: must be <="),
        ("classes.chat.output_tokens=.nan", "classes.chat.output_tokens: must be a finite"),
    ],
)
def test_overrides_are_checked_as_the_file_is(tmp_path: Path, override: str, message: str) -> None:
    text = refused(scenario(tmp_path, BASE), [override])
    assert text.startswith(f"--set {override}"[:40]) and message in text, text


def test_rates_stage_rates_and_bursts_are_bounded(tmp_path: Path) -> None:
    text = refused(scenario(tmp_path, "duration: 10s\nclasses:\n  o: {rate: .inf}\n"))
    assert "3:7: classes.o.rate: must be a finite number" in text
    stages = "classes:\n  o: {rate: 1}\nstages:\n  - {duration: 2s, rate: {o: .nan}}\n"
    assert "stages.0.rate.o: must be a finite number" in refused(scenario(tmp_path, stages))
    bursts = BASE + "bursts:\n  - {class: chat, every: 0.000000001}\n"
    started = time.monotonic()
    assert "bursts in the run; at most 100,000" in refused(scenario(tmp_path, bursts))
    assert time.monotonic() - started < 5


def test_bursts_are_bounded_in_all_not_only_per_entry(tmp_path: Path) -> None:
    """Issue 43, item 3: 1,000 entries of 100,000 burst times each took 3.9 GB and 19 s."""
    entries = "".join("  - {class: chat, every: 0.0001}\n" for _ in range(1000))
    started = time.monotonic()
    text = refused(scenario(tmp_path, BASE + "bursts:\n" + entries))
    assert "bursts.5: brings the bursts to 119,994 burst times in all; at most 100,000" in text
    assert time.monotonic() - started < 5  # noqa: PLR2004


def test_slo_numbers_are_bounded(tmp_path: Path) -> None:
    slo = BASE + "slo:\n  tpot: {p99: .inf}\n  ttft: {p99: 1" + "0" * 400 + "}\n"
    text = refused(scenario(tmp_path, slo))
    assert "slo.tpot.p99: must be <=" in text and "slo.ttft.p99: must be <=" in text, text


def test_parse_duration_refuses_what_would_overflow() -> None:
    for value in (float("nan"), float("inf"), 10**400, "1" * 500 + "s"):
        with pytest.raises(ValueError):
            parse_duration(value)
    assert parse_duration("1h30m") == 5400


def test_distributions_refuse_non_finite_and_huge() -> None:
    for spec in (float("nan"), float("inf"), 10**400, {"dist": "exponential", "mean": 1e300}):
        with pytest.raises(DistributionError):
            parse_distribution(spec)
    assert sample_int(Fixed(float("inf")), None) == MAX_VALUE  # type: ignore[arg-type]


# --- item 6: YAML alias bombs, recursive aliases, deep nesting ----------------------------


def test_an_alias_bomb_is_refused_early(tmp_path: Path) -> None:
    started = time.monotonic()
    text = refused(scenario(tmp_path, ALIAS_BOMB))
    assert "values (aliases expanded)" in text and text.startswith(str(tmp_path / "s.yaml:"))
    assert time.monotonic() - started < 5


def test_an_alias_bomb_in_a_set_value_is_refused(tmp_path: Path) -> None:
    """The web form's ``tpot_set`` goes through the same loader: 285 bytes froze the master."""
    bomb = "[" + ", ".join(["*a"] * 9) + "]"
    value = "{a: &a [x,x,x,x,x,x,x,x,x], b: &b " + bomb + "}"
    for level in range(7):
        value = value[:-1] + f", {chr(99 + level)}: &{chr(99 + level)} "
        value += bomb.replace("*a", f"*{chr(98 + level)}") + "}"
    started = time.monotonic()
    text = refused(scenario(tmp_path, BASE), [f"classes.chat.extra_body={value}"])
    assert text.startswith("--set classes.chat.extra_body") and "aliases expanded" in text
    assert time.monotonic() - started < 5


def test_long_keys_and_texts_expanded_by_aliases_are_bounded() -> None:
    """A long key above an alias bomb is repeated in every path under it (17 GB once); a
    long text aliased many times would be written out or sent that many times."""
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [" + ",".join(["*a"] * 9) + "]\n"
    bomb += "c: &c [" + ",".join(["*b"] * 9) + "]\n"
    for key_length, message in ((200_000, "a key longer than 1,024"), (1000, "characters of")):
        text = bomb + "? " + "k" * key_length + "\n: [" + ",".join(["*c"] * 100) + "]\n"
        with pytest.raises(ScenarioError, match=message):
            parse_located(text, "x")
    text = 'a: &a "' + "x" * 900_000 + '"\nb: [' + ",".join(["*a"] * 1000) + "]\n"
    with pytest.raises(ScenarioError, match="characters of keys and texts"):
        parse_located(text, "x")


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    text = refused(scenario(tmp_path, BASE + "    extra_body: &a {x: [*a]}\n"))
    assert "s.yaml:5:" in text and "recursive" in text, text


@pytest.mark.parametrize("depth", [65, 5000])
def test_deep_nesting_is_refused_with_its_line(tmp_path: Path, depth: int) -> None:
    text = refused(scenario(tmp_path, BASE + "    extra_body: " + "[" * depth + "]" * depth))
    assert "s.yaml:5:" in text and "nested deeper than 64 levels" in text, text


def test_nesting_within_the_limit_loads() -> None:
    """Not a fix: the limit leaves room for any real scenario."""
    assert parse_located("a: " + "[" * 60 + "]" * 60, "x").data["a"] is not None


def test_overrides_deeper_than_the_limit_are_refused(tmp_path: Path) -> None:
    text = refused(scenario(tmp_path, BASE), ["a" + ".a" * 100 + "=1"])
    assert "deeper than 64 levels" in text


def test_bad_scalars_are_errors_at_their_line(tmp_path: Path) -> None:
    for value in ("2020-02-30", "1" * 5000, "!!python/name:os.system x"):
        text = refused(scenario(tmp_path, BASE + f"    model: {value}\n"))
        assert "s.yaml:5:" in text and "invalid value" in text, text


# --- item 7: bounded reading of the files a scenario names --------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "dataset: zero.jsonl",
        "trace: /dev/zero",
        "prompt_tokens: {dist: empirical, file: /dev/zero}",
    ],
)
def test_devices_are_refused_before_they_are_read(tmp_path: Path, key: str) -> None:
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")  # a dataset's name, a device's bytes
    mode = "" if key.startswith("trace") else "    rate: 1\n"
    started = time.monotonic()
    text = refused(scenario(tmp_path, f"duration: 2s\nclasses:\n  chat:\n{mode}    {key}\n"))
    assert "not a regular file" in text, text
    assert time.monotonic() - started < 2


def test_directories_and_fifos_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BoundedFileError, match="is a directory"):
        read_text(tmp_path, 100)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(ScenarioError, match="not a regular file"):
        load_dataset(fifo)  # opening it would block until a writer came
    assert time.monotonic() - started < 2


def test_a_file_over_the_size_cap_is_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("wb") as file:
        file.truncate(DATA_FILE_MAX_BYTES + 1)  # sparse: nothing is written
    for load in (load_dataset, load_trace):
        with pytest.raises(ScenarioError, match="the limit is 256 MiB"):
            load(big)
    text = refused(scenario(tmp_path, "x" * 2_000_000))
    assert "the limit is 1 MiB (a scenario file)" in text


def test_a_line_over_the_line_cap_is_refused_while_reading(tmp_path: Path) -> None:
    long = tmp_path / "long.jsonl"
    with long.open("wb") as file:
        file.write(b'{"text": "a"}\n')
        file.truncate(64 * 1024 * 1024)  # a 64 MiB second line of zero bytes, no newline
    with pytest.raises(BoundedFileError, match="line 2 is longer than the limit of 8 MiB"):
        list(read_lines(long, DATA_FILE_MAX_BYTES))
    with pytest.raises(ScenarioError, match=r"long\.jsonl:2:1: line 2 is longer"):
        load_dataset(long)


def test_a_1_gb_single_line_file_costs_little_memory(tmp_path: Path) -> None:
    """A sparse 1 GB file with no newline: refused by its size, memory flat (was 2.1 GB)."""
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as file:
        file.truncate(1024**3)
    code = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from tpot_locust.scenario.trace import load_trace\n"
        "from tpot_locust.scenario.datasets import load_dataset\n"
        "from tpot_locust.common.distributions import load_empirical\n"
        "for load in (load_trace, load_dataset, lambda p: load_empirical(p, None)):\n"
        "    try:\n"
        "        load(Path(sys.argv[1]))\n"
        "    except ValueError:\n"
        "        pass\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(huge)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) < 300 * 1024, result.stdout  # KiB: no more than the imports


def test_lines_under_the_cap_are_read(tmp_path: Path) -> None:
    path = tmp_path / "ok.jsonl"
    path.write_text('{"text": "' + "a" * (LINE_MAX_BYTES - 20) + '"}\n{"text": "b"}\n')
    assert len(load_dataset(path)) == 2


# --- item 10: many problems, big files -----------------------------------------------------


def test_problems_are_capped_and_counted(tmp_path: Path) -> None:
    keys = "".join(f"unknown_key_{i}: 1\n" for i in range(20_000))
    started = time.monotonic()
    text = refused(scenario(tmp_path, BASE + keys))
    assert time.monotonic() - started < 10
    lines = text.splitlines()
    assert len(lines) == MAX_PROBLEMS + 1, len(lines)
    assert lines[-1] == f"... {20_000 - MAX_PROBLEMS} more problems not shown"


def test_long_unknown_keys_are_shortened_in_errors(tmp_path: Path) -> None:
    keys = "".join(f"{'k' * 1000}{i}: 1\n" for i in range(150))
    started = time.monotonic()
    text = refused(scenario(tmp_path, BASE + keys))
    assert time.monotonic() - started < 5
    assert len(text) < 80 * 1000, len(text)  # 150 KB of keys are not repeated whole
    assert "..." in text.splitlines()[0]


def test_a_scenario_is_parsed_once_per_content(tmp_path: Path, monkeypatch) -> None:
    from tpot_locust.scenario import loader

    path = scenario(tmp_path, BASE)
    calls = []
    real = loader.parse_located
    monkeypatch.setattr(loader, "parse_located", lambda *a: calls.append(a) or real(*a))
    load_scenario(path)
    load_scenario(path, ["classes.chat.users=3"])
    assert scenario_document(path, ["duration=4s"])["duration"] == "4s"
    assert len([call for call in calls if call[1] == str(path)]) == 1
    assert load_scenario(path).classes[0].users == 1  # overrides never leak into the cache
    path.write_text(BASE.replace("users: 1", "users: 2"))  # same size, maybe the same mtime
    assert load_scenario(path).classes[0].users == 2


# --- item 12: trace and dataset rows checked on load ---------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"t": NaN, "input_tokens": 4, "output_tokens": 8}', "NaN is not a JSON number"),
        ('{"t": Infinity, "input_tokens": 4, "output_tokens": 8}', "Infinity is not a JSON"),
        ('{"t": 1e400, "input_tokens": 4, "output_tokens": 8}', "t: must be a number >= 0"),
        ('{"t": 1e9, "input_tokens": 4, "output_tokens": 8}', "t: must be a number >= 0"),
        ('{"t": 1, "input_tokens": 4, "output_tokens": 1' + "0" * 400 + "}", "output_tokens"),
        ('{"t": 1, "input_tokens": ' + "[" * 100_000 + "]" * 100_000 + "}", "not a JSON"),
    ],
)
def test_trace_lines_are_checked_on_load(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"t": 0, "input_tokens": 4, "output_tokens": 8}\n' + line + "\n")
    with pytest.raises(ScenarioError) as raised:
        load_trace(path)
    assert str(raised.value).startswith(f"{path}:2:1: ") and message in str(raised.value)


@pytest.mark.parametrize(
    "row",
    [
        {"text": "hi", "output_tokens": float("nan")},
        {"text": "hi", "output_tokens": float("inf")},
        {"text": "hi", "output_tokens": 10**400},
        {"text": "hi", "output_tokens": 100_000_000},
    ],
)
def test_dataset_rows_are_checked_on_load(tmp_path: Path, row: dict) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"text": "fine"}\n' + json.dumps(row) + "\n")
    with pytest.raises(ScenarioError, match=r"data\.jsonl:2:1: "):
        load_dataset(path)


def test_empirical_values_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "lengths.jsonl"
    for bad in ("NaN", "1e400", '"nan"', '"inf"', str(10**8)):
        path.write_text(f"5\n{bad}\n")
        with pytest.raises(DistributionError):
            parse_distribution({"dist": "empirical", "file": str(path)})


# --- item 16: names validate refuses as run would ------------------------------------------


@pytest.mark.parametrize(
    "name", ['"a\\0b"', '"\\ud800"', '"tab\\there"', '"\\e[31mred"', '"line\\nbreak"', '""']
)
def test_names_must_be_printable_text(tmp_path: Path, name: str) -> None:
    text = refused(scenario(tmp_path, f"name: {name}\n" + BASE))
    assert "s.yaml:1:1: name: must" in text, text


def test_ordinary_names_still_load(tmp_path: Path) -> None:
    for name in ("release gate", "café-2", "ü/ß"):
        assert load_scenario(scenario(tmp_path, f"name: {name}\n" + BASE)).name == name


def test_paths_with_control_characters_are_refused(tmp_path: Path) -> None:
    text = refused(scenario(tmp_path, BASE + '    dataset: "a\\0b.jsonl"\n'))
    assert "classes.chat.dataset: must be a path without control characters" in text


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ('{X-Note: "café ☃"}', "latin-1"),
        ('{X-Note: "a\\r\\nX-Injected: 1"}', "line break"),
        ('{"X Bad": 1}', "header name"),
        ("{X-Note: [1]}", "text or a number"),
        # issue 43, item 6: the wire had carried two Hosts and two Content-Lengths
        ("{Host: evil.example}", "Host is the client's to set"),
        ('{Content-Length: "0"}', "Content-Length is the client's to set"),
        ("{transfer-encoding: chunked}", "transfer-encoding is the client's to set"),
        ("{Connection: upgrade}", "Connection is the client's to set"),
        ("{TE: trailers}", "TE is the client's to set"),
    ],
)
def test_headers_are_checked_as_http_carries_them(
    tmp_path: Path, headers: str, message: str
) -> None:
    scenario = tmp_path / "headers.yaml"
    scenario.write_text(
        f"name: h\nduration: 2s\nserver: {{headers: {headers}}}\nclasses:\n  c: {{users: 1}}\n"
    )
    with pytest.raises(ScenarioError, match=message):
        load_scenario(scenario)


@pytest.mark.parametrize(
    "host",
    ["http://127.0.0.1:9/a HTTP/1.0 b", "http://127.0.0.1:9/\x01", "http://127.0.0.1:9/caf\u00e9"],
)
def test_a_host_url_path_that_would_break_the_request_line_is_refused(host: str) -> None:
    with pytest.raises(ValueError, match="in the URL's path: percent-encode it"):
        Origin.parse(host)
    assert Origin.parse("http://127.0.0.1:9/a%20b/v1").base_path == "/a%20b"


def test_a_class_may_not_take_the_name_of_every_class(tmp_path: Path) -> None:
    """``all`` is every class together in the reports, compare, gates and live metrics."""
    message = refused(scenario(tmp_path, "name: s\nclasses:\n  all: {users: 1}\n"))
    assert "s.yaml:3:3: classes.all: 'all' names every class together" in message


@pytest.mark.parametrize("stop_timeout", ["1.5", "0.5s", "2m0.5s"])
def test_a_stop_timeout_locust_cannot_read_is_refused_by_validate(
    tmp_path: Path, stop_timeout: str
) -> None:
    """Locust's --stop-timeout takes whole seconds: 1.5 passed validate, started the
    simulator, then Locust refused it (issue 57, item 1)."""
    text = refused(scenario(tmp_path, BASE + f"stop_timeout: {stop_timeout}\n"))
    assert ":5:" in text and "stop_timeout" in text and "whole seconds" in text, text


def test_long_durations_reach_locust_as_plain_digits(tmp_path: Path) -> None:
    """A 12-day run and stop timeout: Locust's parser reads 1036800, never 1.0368e+06."""
    from locust.util.timespan import parse_timespan

    from tpot_locust.cli.locust_command import headless_options

    path = scenario(
        tmp_path, "duration: 288h\nstop_timeout: 288h\nclasses:\n  chat:\n    users: 1\n"
    )
    options = dict(option.split("=", 1) for option in headless_options(load_scenario(path))[2:])
    assert options["--run-time"] == "1036800s" and options["--stop-timeout"] == "1036800"
    assert parse_timespan(options["--run-time"]) == parse_timespan("1036800") == 1_036_800


@pytest.mark.parametrize(
    "value", ["/dcgm/my metrics", "{sim: /dcgm/a b}", "http://127.0.0.1:9400/a b"]
)
def test_a_gpu_metrics_url_or_path_with_a_space_is_refused(tmp_path: Path, value: str) -> None:
    """Issue 57, item 7: it passed validate, and would have gone into the request line raw."""
    text = refused(scenario(tmp_path, BASE + f"server:\n  gpu_metrics: {value}\n"))
    assert "gpu_metrics" in text and "no spaces" in text, text


@pytest.mark.parametrize(
    "burst", ["{class: chat, count: 1, every: 30s}", "{class: chat, count: 1, at: [5s, 9s]}"]
)
def test_a_burst_that_never_fires_within_the_run_is_refused(tmp_path: Path, burst: str) -> None:
    """Issue 57, item 7: a burst past the run's end never fired, and the run passed."""
    text = refused(scenario(tmp_path, BASE.replace("2s", "4s") + f"bursts:\n  - {burst}\n"))
    assert "bursts.0" in text and "it never fires" in text, text
