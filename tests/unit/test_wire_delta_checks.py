"""A damaged or hostile worker delta (``metrics.wire_delta``) is refused whole, with a clear
error, before anything of it is added: sizes bounded, every number in range."""

from __future__ import annotations

import copy
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tpot_locust.metrics.histograms import HistogramDecodeError, counts_view, record_many
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.metrics.span_counts import MAX_BLOCK_BYTES
from tpot_locust.metrics.wire_delta import decode_delta, encode_delta


def a_delta() -> dict[str, Any]:
    delta = MetricSet()
    chat = delta.for_group("chat")
    record_many(chat.histogram("itl"), np.arange(1000, 9000, 3))
    record_many(chat.histogram("ttft"), np.array([250_000]))
    chat.counters.ok = 5
    chat.counters.errors["timeout"] = 1
    chat.tail_gaps = [{"ms": 40.5, "request_id": "r1"}, {"ms": 12, "request_id": "r2"}]
    record_many(delta.client.loop_lag, np.array([10, 20, 3000]))
    delta.client.note_stall(10**18, 10**18 + 5 * 10**7)
    return encode_delta(delta)


def with_data(raw: bytes) -> Callable[[dict[str, Any]], None]:
    def change(delta: dict[str, Any]) -> None:
        delta["histograms"]["data"] = raw

    return change


def setter(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set ``a.b.0.c`` (list indexes as numbers) to ``value``."""

    def change(delta: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = delta
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def spans_of(*counts: list[int], width: str = "<u1") -> Callable[[dict[str, Any]], None]:
    """The block's histograms replaced by these spans (one owner, one width)."""

    def change(delta: dict[str, Any]) -> None:
        raw = b"".join(np.array(c, dtype=width).tobytes() for c in counts)
        block = delta["histograms"]
        size = np.dtype(width).itemsize
        block.update(
            owners=[0] * len(counts),
            names=[f"h{i}" for i in range(len(counts))],
            first=[100] * len(counts),
            widths=[size] * len(counts),
            lengths=[len(c) for c in counts],
            copy_of=[-1] * len(counts),
            data=zlib.compress(raw),
        )

    return change


HOSTILE: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "groups not a mapping": (setter("groups", [1]), "groups not a mapping"),
    "a group's name": (
        lambda d: d["groups"].update({"x" * 300: d["groups"]["chat"]}),
        "a group's name",
    ),
    "a negative counter": (setter("groups.chat.counters.ok", -1), "counters.ok"),
    "a float counter": (setter("groups.chat.counters.ok", 1.5), "counters.ok"),
    "a counter past int64": (setter("groups.chat.counters.ok", 2**63), "counters.ok"),
    "a bool for a counter": (setter("groups.chat.counters.ok", True), "counters.ok"),
    "an error count": (setter("groups.chat.counters.errors.timeout", "1"), "errors.timeout"),
    "too many interrupted ids": (
        setter("groups.chat.counters.interrupted_ids", ["r"] * 101),
        "interrupted_ids",
    ),
    "gaps without ms": (setter("groups.chat.tail_gaps.keys.0", "size"), "no ms column"),
    "a NaN gap": (setter("groups.chat.tail_gaps.columns.0.0", float("nan")), "finite size"),
    "an infinite gap": (setter("groups.chat.tail_gaps.columns.0.1", float("inf")), "finite"),
    "a text for a gap's size": (setter("groups.chat.tail_gaps.columns.0.1", "1"), "finite"),
    "a list for a gap's size": (setter("groups.chat.tail_gaps.columns.0", [[1], [2]]), "finite"),
    "a None for a stall's size": (setter("client.worst_stalls.0.ms", None), "finite"),
    "a column short": (setter("groups.chat.tail_gaps.columns.1", ["r1"]), "different lengths"),
    "a key twice": (setter("groups.chat.tail_gaps.keys.1", "ms"), "a key twice"),
    "too many gaps": (
        setter("groups.chat.tail_gaps.columns", [[1.0] * 1001, ["r"] * 1001]),
        "past 1000",
    ),
    "a row without ms": (setter("groups.chat.tail_gaps.rows", [{"request_id": "r"}]), "finite"),
    "too many rows": (setter("groups.chat.tail_gaps.rows", [{"ms": 1.0}] * 1001), "too many"),
    "no tail": (setter("groups.chat.tail_gaps", [{"ms": 1.0}]), "tail_gaps: not a mapping"),
    "a client count": (setter("client.stalls", -3), "client: stalls"),
    "too many stalls": (setter("client.worst_stalls", [{"ms": 1.0}] * 11), "worst_stalls"),
    "no histogram block": (setter("histograms", None), "not a block"),
    "lists of different lengths": (setter("histograms.widths", [1]), "different lengths"),
    "an owner past the groups": (setter("histograms.owners.0", 2), "not one"),
    "a width of 3": (setter("histograms.widths.0", 3), "not one"),
    "a span past the layout": (setter("histograms.first.0", 23_000), "outside this tool"),
    "an empty span": (setter("histograms.lengths.0", 0), "outside this tool"),
    "a histogram twice": (setter("histograms.names.1", "itl"), "a histogram twice"),
    "a long name": (setter("histograms.names.0", "n" * 201), "short text"),
    "the loop lag under another name": (setter("histograms.names.2", "lag"), "client: a"),
    "data that is not bytes": (setter("histograms.data", "abc"), "no data"),
    "data that is not zlib": (with_data(b"not zlib at all"), "zlib"),
    "truncated data": (lambda d: with_data(d["histograms"]["data"][:-9])(d), "truncated"),
    "data past its sizes": (with_data(zlib.compress(b"\x01" * 10**6)), "not the"),
    "data after the stream": (lambda d: with_data(d["histograms"]["data"] + b"x")(d), "not the"),
    "an untrimmed span": (spans_of([0, 1, 1]), "not trimmed"),
    "a span ending in 0": (spans_of([1, 1, 0]), "not trimmed"),
    "a count beyond any run's": (spans_of([2**49], width="<u8"), "a count beyond"),
    "a total beyond any run's": (spans_of([2**47] * 3, width="<u8"), "a total beyond"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_delta_is_refused_whole_with_what_is_wrong(case: str) -> None:
    change, expected = HOSTILE[case]
    delta = copy.deepcopy(a_delta())
    decode_delta(copy.deepcopy(delta))  # the unchanged one reads
    change(delta)
    with pytest.raises(HistogramDecodeError, match=expected):
        decode_delta(delta)


def a_delta_with_twins() -> dict[str, Any]:
    """ITL and TPOT one histogram (each event one token), its ``@none`` part all of it."""
    delta = MetricSet()
    chat = delta.for_group("chat")
    for name in ("itl", "tpot", "itl@none"):
        record_many(chat.histogram(name), np.arange(1000, 9000, 3))
    record_many(chat.histogram("ttft"), np.array([250_000, 260_000]))
    return encode_delta(delta)


def test_a_twin_span_travels_once_and_reads_back_as_itself() -> None:
    wire = a_delta_with_twins()
    block = wire["histograms"]
    assert block["names"] == ["itl", "tpot", "itl@none", "ttft"]
    assert block["copy_of"] == [-1, 0, 0, -1]
    single = encode_delta(MetricSet.decode(decode_delta(wire).to_metric_set().encode()))
    assert len(zlib.decompress(block["data"])) == sum(
        w * n
        for w, n, c in zip(block["widths"], block["lengths"], block["copy_of"], strict=True)
        if c < 0
    )
    histograms = decode_delta(wire).to_metric_set().groups["chat"].histograms
    assert all(
        (counts_view(histograms[name]) == counts_view(histograms["itl"])).all()
        and histograms[name].total_count == histograms["itl"].total_count
        for name in ("tpot", "itl@none")
    )
    assert single == wire


TWIN_HOSTILE = {
    "a copy of a later span": ([-1, 2, 0, -1], "not its twin"),
    "a copy of itself": ([-1, 1, 0, -1], "not its twin"),
    "a copy of a copy": ([-1, 0, 1, -1], "not its twin"),
    "a copy of another length": ([-1, 0, 0, 0], "not its twin"),
    "a copy index below -1": ([-1, -2, 0, -1], "not its twin"),
    "a copy index past the spans": ([-1, 9, 0, -1], "not its twin"),
    "a float for an index": ([-1, 0.0, 0, -1], "not one"),
    "a bool for an index": ([-1, False, 0, -1], "not one"),
    "a copy that has data of its own": ([-1, -1, 0, -1], "not the"),
    "copies short": ([-1, 0, 0], "different lengths"),
}


@pytest.mark.parametrize("case", list(TWIN_HOSTILE))
def test_a_copy_that_is_no_twin_is_refused(case: str) -> None:
    copy_of, expected = TWIN_HOSTILE[case]
    delta = a_delta_with_twins()
    delta["histograms"]["copy_of"] = copy_of
    with pytest.raises(HistogramDecodeError, match=expected):
        decode_delta(delta)


def test_a_block_is_bounded_before_it_is_inflated() -> None:
    delta = a_delta()
    block = delta["histograms"]
    count = MAX_BLOCK_BYTES // (8 * 23_000) + 1
    block.update(
        owners=[0] * count,
        names=[f"h{i}" for i in range(count)],
        first=[0] * count,
        widths=[8] * count,
        lengths=[23_000] * count,
        copy_of=[-1] * count,
    )
    with pytest.raises(HistogramDecodeError, match="more than any delta"):
        decode_delta(delta)


def test_gaps_of_other_keys_travel_as_rows_and_read_back_as_they_were() -> None:
    delta = MetricSet()
    gaps = [{"ms": 9.0, "request_id": "a"}, {"ms": 4, "other": [1]}, {"ms": 1.5}]
    delta.for_group("chat").tail_gaps = gaps
    wire = encode_delta(delta)
    assert wire["groups"]["chat"]["tail_gaps"]["rows"] == gaps
    assert decode_delta(wire).to_metric_set().groups["chat"].tail_gaps == gaps


def test_the_largest_counts_a_run_can_have_still_read() -> None:
    delta = MetricSet()
    histogram = delta.for_group("chat").histogram("itl")
    counts_view(histogram)[5000] = 2**48
    histogram.total_count = 2**48
    decoded = decode_delta(encode_delta(delta)).to_metric_set()
    assert decoded.groups["chat"].histograms["itl"].total_count == 2**48
