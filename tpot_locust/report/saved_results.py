"""Saved results read back: size-capped, shape-checked, one clear error per problem.

``report``, ``report --html`` and ``compare`` read files a person may have edited, a disk
may have truncated or someone may have crafted. Every document is read here (a regular file
of at most ``MAX_RESULTS_BYTES``), parsed with huge integers and NaN/Infinity kept aside,
and checked against its shape below before anything uses it, so a problem is one
``FILE: key.path: message`` (a ``ValueError``: the command line's exit 2), never a
traceback deep in the report.
"""

from __future__ import annotations

import json
import os
import stat
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.run_facts import RunFacts, TimeseriesPoint
from tpot_locust.metrics.metric_set import ClassCounters
from tpot_locust.metrics.tail_gaps import TAIL_GAPS_KEPT
from tpot_locust.report.json_checks import (
    Check,
    Problem,
    Unusable,
    anything,
    integer,
    list_of,
    mapping,
    number,
    optional,
    record,
    scrubbed,
    shaped,
    text,
)
from tpot_locust.report.summary_types import Summary, TailGap, TruthCheck, Verdict, WorstStall

MAX_RESULTS_BYTES = 256 * 1024 * 1024
MAX_BLOB = 1 << 20  # one encoded histogram (the decoder checks the rest)
MAX_INT_DIGITS = 20


class ResultsError(ValueError):
    """A saved results file that cannot be read: ``FILE: key.path: message``."""

    def __init__(self, path: Path, key: str, message: str) -> None:
        super().__init__(f"{path}: {key}: {message}" if key else f"{path}: {message}")


def _parse_int(text: str) -> int | Unusable:
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else Unusable(text)


def read_json(path: Path) -> object:
    """The JSON of a regular file of at most ``MAX_RESULTS_BYTES``; ``FileNotFoundError``
    when there is none, ``ResultsError`` for anything else wrong."""
    return _parse(path, _read_bytes(path, MAX_RESULTS_BYTES))


def _read_bytes(path: Path, max_bytes: int) -> bytes:
    """A regular file's bytes, refused beyond ``max_bytes`` (devices, FIFOs and folders
    are refused before any read)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block
    except FileNotFoundError:
        raise
    except OSError as error:
        raise ResultsError(path, "", f"cannot be read ({error.strerror})") from None
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
        os.close(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise ResultsError(path, "", "not a regular file")
        raise ResultsError(
            path,
            "",
            f"{info.st_size:,} bytes: larger than any results "
            f"file ({max_bytes // 2**20} MiB at most)",
        )
    with os.fdopen(descriptor, "rb") as file:
        data = file.read(info.st_size + 1)  # read(n) allocates n bytes: the size, not the cap
    if len(data) > info.st_size:
        raise ResultsError(path, "", "grew while it was read (a run still writing it?)")
    return data


def read_text(path: Path, max_bytes: int = MAX_RESULTS_BYTES) -> str:
    """A regular file's text (at most ``max_bytes``; undecodable bytes replaced)."""
    return _read_bytes(path, max_bytes).decode("utf-8", errors="replace")


def _parse(path: Path, data: bytes) -> object:
    try:
        return json.loads(data.decode("utf-8"), parse_int=_parse_int, parse_constant=Unusable)
    except UnicodeDecodeError as error:
        raise ResultsError(path, "", f"not UTF-8 text (byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise ResultsError(
            path,
            "",
            f"not valid JSON (line {error.lineno} column "
            f"{error.colno}: {error.msg}); is it truncated?",
        ) from None
    except RecursionError:
        raise ResultsError(path, "", "nested too deeply to be a results file") from None


# --- the documents ------------------------------------------------------------------------

_NUMBER0 = number(0.0)
_COUNTERS = record(
    {f.name: integer() for f in fields(ClassCounters) if f.type == "int"}
    | {"errors": mapping(integer(), 10_000), "interrupted_ids": list_of(text(1000), 10_000)}
)
_TAIL_GAP = shaped(TailGap, {})
_CLASS = record(
    {
        "histograms": mapping(text(MAX_BLOB), 1000),
        "counters": _COUNTERS,
        "tail_gaps": list_of(_TAIL_GAP, TAIL_GAPS_KEPT),
        "worst_gaps": list_of(_TAIL_GAP, TAIL_GAPS_KEPT),
    }
)
_STALL = shaped(WorstStall, {})
_CLIENT = record(
    {
        "loop_lag": optional(text(MAX_BLOB)),
        "stalls": integer(),
        "stalled_ns": integer(),
        "watched_ns": integer(),
        "gc_stalls": integer(),
        "gc_stalled_ns": integer(),
        "worst_stalls": list_of(_STALL, 1000),
    }
)
_POINT_DECLARED = shaped(typing.get_args(TimeseriesPoint)[0], {})  # t, users, ...
_POINT_METRICS = record({name: mapping(number()) for name in catalogue.names("in_timeseries")})


def _point(value: object, key: str) -> object:
    """A time series point: its declared keys as its type says; its metrics', which its
    type cannot declare (``common.run_facts.interval_figures``), here."""
    return _POINT_METRICS(_POINT_DECLARED(value, key), key)


# The parts whose keys are chosen at run time, checked by hand; every other part of the
# run's facts and the summary is checked as its type says (``json_checks.shaped``).
_BY_HAND = {"timeseries point": _point, "unchecked": anything()}
FACTS = shaped(RunFacts, _BY_HAND)  # the run's facts, read back as the dataclass


HISTOGRAMS = record(
    {"run": FACTS, "classes": mapping(_CLASS, 10_000), "client": _CLIENT}, required=("classes",)
)
# ``workers/<id>.json``: what one worker recorded and sent (``report.recovery`` adds them up
# where the master's results were lost); its stall windows are the truth check's to read
WORKER_AUDIT = record(
    {
        "client_id": text(1000),
        "classes": mapping(_CLASS, 10_000),
        "client": _CLIENT,
        "window_wall_ns": list_of(integer(), 2),
    },
    required=("classes",),
)
# Histograms one results file may hold over all its classes: each decodes to ~185 KiB
# whatever its size on disk (1 us .. 1 h at 3 digits), so 500 small classes had taken
# 1.6 GB; a run of 80 classes (or class and model pairs) with every cause copy fits.
MAX_SAVED_HISTOGRAMS = 2_000


def refuse_too_many_histograms(path: Path, saved: dict[str, Any]) -> None:
    """``ResultsError`` when ``saved`` (checked ``HISTOGRAMS``) holds more histograms than
    can be decoded in bounded memory: counted before any is decoded."""
    classes = saved["classes"]
    count = sum(len(part.get("histograms") or {}) for part in classes.values())
    if count > MAX_SAVED_HISTOGRAMS:
        raise ResultsError(
            path,
            "classes",
            f"{count:,} histograms over {len(classes):,} "
            f"classes; at most {MAX_SAVED_HISTOGRAMS:,} (each decodes to "
            "~185 KiB)",
        )


VERDICT = shaped(Verdict, _BY_HAND)  # verdict.json, and a summary's "slo"
TRUTH = shaped(TruthCheck, _BY_HAND)


def _summary_part(keys: tuple[str, ...], required: tuple[str, ...] = ()) -> Check:
    """These keys of a saved summary.json, each checked as ``Summary`` types it; one not
    required may be null (a part that failed) or missing (an older version's file)."""
    hints = typing.get_type_hints(Summary, include_extras=True)
    checks = {key: shaped(hints[key], _BY_HAND) for key in keys}
    return record(
        {key: check if key in required else optional(check) for key, check in checks.items()},
        required,
    )


# What ``report --html`` takes of a saved summary.json (the rest it rebuilds from the
# histograms): the parts that joined it at the end of the run.
SUMMARY_EXTRAS = _summary_part(
    ("slo", "truth_check", "attribution_check", "report_error", "complete")
)
# What a sweep reads of each step's summary.json.
STEP_SUMMARY = _summary_part(
    ("slo", "run", "requests", "tokens", "goodput", "metrics"), required=("requests", "tokens")
)


def checked(path: Path, document: object, shape: Check) -> Any:
    """``document`` (read from ``path``) as ``shape`` has it, or ``ResultsError``."""
    try:
        return scrubbed(shape(document, ""))
    except Problem as problem:
        raise ResultsError(path, problem.key or "(top level)", problem.message) from None
    except RecursionError:
        raise ResultsError(path, "", "nested too deeply to be a results file") from None


def read_checked(path: Path, shape: Check) -> Any:
    """``read_json`` and ``checked`` in one."""
    return checked(path, read_json(path), shape)
