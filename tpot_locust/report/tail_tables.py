"""Why the tail, in tables: report.html's shares, the server's own percentiles, the check.

- ``shares_table``: the share of the samples above P99, P99.9 and P99.99 of TPOT and ITL
  by the cause they overlapped, each row adding up to 100 % (as the terminal's
  ``attribution.format_why_the_tail``), and ``prefill_tokens_table``: how many of the gaps
  (every gap, each tail's) overlapped a prefill, with the prompt tokens in prefill then.
- ``server_own_percentiles``: our ITL and TTFT percentiles beside the server's own, which a
  bucketed histogram knows only as the bounds of the bucket each lies in ("below 10 ms",
  "10-25 ms", "above 80 s"; ``bucket_text``), never a digit it does not have, with a line
  saying how coarse its buckets are (``coarseness``); ``server_facts``: where the server's
  metrics came from and its notes.
- ``attribution_check_parts``: precision and recall of our causes against the simulator's
  true causes (``report.attribution_check``).

A summary may come from a saved ``summary.json`` a person edited: every value is checked
where it is used (a value that is not a finite number is shown as '-', a part of the wrong
shape is skipped), and every text is escaped (``shown``: ``printable``, then
``charts.escape``). The checked readers here
(``finite``, ``as_dict``, ``as_list``) serve ``tail_pictures`` too.
"""

from __future__ import annotations

import math

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.metric_catalogue import ITL, TTFT
from tpot_locust.common.percentiles import PERCENTILE_KEYS
from tpot_locust.common.text_safety import printable
from tpot_locust.metrics.causes import CAUSES, UNEXPLAINED
from tpot_locust.metrics.histogram_names import CAUSE_METRICS
from tpot_locust.report.attribution import cause_title, prefill_scopes, shares_of_100
from tpot_locust.report.charts import escape
from tpot_locust.report.summary_types import Summary

OWN_PERCENTILES = PERCENTILE_KEYS
SHORTS = catalogue.shorts()
OWN_METRICS = ((ITL.name, ITL.short), (TTFT.name, TTFT.short))


# --- values read from a summary, checked ---------------------------------------------------


def finite(value: object) -> float | None:
    """A finite number, else None (absent, null, text, a bool, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def as_dict(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def count_text(value: object) -> str:
    number = finite(value)
    return "-" if number is None else f"{number:,.0f}"


def ms_text(value: object, digits: int = 3) -> str:
    number = finite(value)
    return "-" if number is None else f"{number:.{digits}f}"


def shown(text: object) -> str:
    """Text for the page: escape sequences dropped and every control or bidirectional
    character shown as an escape (``printable``: a server's text must not reorder or hide
    what follows it), then HTML-escaped."""
    return escape(printable(text))


def table(rows: list[list[str]], header: list[str]) -> str:
    """Header cells are escaped here; row cells are HTML their caller escaped."""
    head = "".join(f"<th>{shown(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def note(text: str) -> str:
    return f'<p class="note">{shown(text)}</p>'


# --- the shares ----------------------------------------------------------------------------


def _causes_shown(attribution: dict[str, object]) -> list[str]:
    seen = {
        cause
        for name in CAUSE_METRICS
        for row in as_dict(attribution.get(name)).values()
        for cause in as_dict(as_dict(row).get("shares"))
    }
    return [cause for cause in (*CAUSES, UNEXPLAINED) if cause in seen]


def shares_table(attribution: dict[str, object]) -> list[str]:
    """Share of the samples above each percentile by the cause they overlapped, each row
    in parts that add up to 100 % (``attribution.shares_of_100``)."""
    causes = _causes_shown(attribution)
    causes += [] if UNEXPLAINED in causes else [UNEXPLAINED]  # a row's rest: what none took
    rows = []
    for name in CAUSE_METRICS:
        for key, row in as_dict(attribution.get(name)).items():
            if not isinstance(row, dict):
                continue
            parts = shares_of_100(as_dict(row.get("shares")), digits=1)
            rows.append(
                [
                    shown(f"{SHORTS.get(name, name)} {key}"),
                    ms_text(row.get("above_ms")),
                    count_text(row.get("samples")),
                    *(f"{parts[c]:.1f} %" if c in parts else "-" for c in causes),
                ]
            )
    if not rows:
        return []
    header = ["", "above ms", "samples", *(cause_title(cause) for cause in causes)]
    return [
        "<h3>Share of the samples above each percentile that overlapped a cause, or none</h3>",
        table(rows, header),
        note(
            "Each row adds up to 100 %: a gap that overlapped several causes is split between "
            "them, in proportion to their shares (summary.json keeps each cause's own share "
            "of the gaps it overlapped). 'no cause': the share that overlapped no cause "
            "window. Exact at any size (histograms kept per cause)."
        ),
    ]


def prefill_tokens_table(attribution: dict[str, object]) -> list[str]:
    """The prompt tokens in prefill at the gaps: the share of each scope's gaps that
    overlapped a prefill and the median of those, beside the median of all of them (0
    where most overlapped none, as most gaps do: the chart below draws what was in flight
    at every moment, which a gap rarely meets)."""
    scopes = prefill_scopes(attribution.get("prefill_tokens"))
    if all(share is None and median is None for _, share, _, median in scopes):
        return []
    header = [
        "",
        *(scope if scope == "every gap" else f"ITL above {scope}" for scope, *_ in scopes),
    ]
    rows = [
        ["gaps that overlapped a prefill", *(_share(share) for _, share, _, _ in scopes)],
        ["prompt tokens in prefill, median of those", *(count_text(m) for _, _, m, _ in scopes)],
        ["prompt tokens in prefill, median of all", *(count_text(m) for *_, m in scopes)],
    ]
    return [
        "<h3>Prompt tokens in prefill at the gaps</h3>",
        table(rows, header),
        note(
            "A gap overlapped a prefill when a prompt's prefill ran during it. Most gaps "
            "overlap none, so the median of all is often 0 while the chart below, the prompt "
            "tokens in flight at every moment, may reach thousands. '-': the tail has more gaps "
            "than were kept (1,000), or none."
        ),
    ]


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def server_facts(server: dict[str, object]) -> list[str]:
    """Where the server's metrics came from, how many samples, and its notes."""
    if not server:
        return []
    url, engine = server.get("url"), server.get("engine")
    interval = finite(server.get("interval_s"))
    where = url if isinstance(url, str) else "-"
    kind = engine if isinstance(engine, str) and engine else "engine not recognised"
    every = f" every {interval:g} s" if interval is not None else ""
    line = (
        f"Server metrics sampled from {where} ({kind}){every}: "
        f"{count_text(server.get('samples'))} samples, {count_text(server.get('slow'))} "
        f"slow, {count_text(server.get('failed'))} failed."
    )
    windows = [
        f"{cause_title(str(name))} {count_text(count)}"
        for name, count in as_dict(server.get("windows")).items()
    ]
    if windows:
        line += f" Server windows: {', '.join(windows)}."
    parts = [note(line)]
    notes = [text for text in as_list(server.get("notes")) if isinstance(text, str)][:20]
    if notes:
        items = "".join(f"<li>{shown(text)}</li>" for text in notes)
        parts.append(f'<ul class="note">{items}</ul>')
    return parts


# --- what the server says about itself -----------------------------------------------------


def _duration(ms: float) -> tuple[str, str]:
    """A bucket bound as (number, unit): seconds from 1,000 ms; no digit it has not."""
    return (f"{ms / 1000:.6g}", "s") if ms >= 1000 else (f"{ms:.6g}", "ms")


def _bound(ms: float) -> str:
    number, unit = _duration(ms)
    return f"{number} {unit}"


def bucket_text(bounds: object) -> str:
    """The server's figure as the bucket it lies in: "below 10 ms", "10-25 ms", "above 80 s";
    "-" when the histogram held nothing (or the entry is not a bucket)."""
    if not isinstance(bounds, dict):
        return "-"
    low, high = finite(bounds.get("low_ms")), finite(bounds.get("high_ms"))
    if low is None or low < 0:
        return "-"
    if high is None:
        if bounds.get("high_ms") is not None:
            return "-"  # neither a bound nor "past the last bucket"
        return f"above {_bound(low)}" if low > 0 else "no finite bucket"
    if high <= low:
        return "-"
    if low == 0:
        return f"below {_bound(high)}"
    (low_n, low_u), (high_n, high_u) = _duration(low), _duration(high)
    if low_u == high_u:
        return f"{low_n}-{high_n} {high_u}"
    return f"{low_n} {low_u}-{high_n} {high_u}"


def coarseness(label: str, figures: dict[str, object]) -> str:
    """How coarse the server's figures are: which percentiles share a bucket, the widest
    bucket among them, and those below its first bound or past its last."""
    shown = [(key, figures.get(key)) for key in OWN_PERCENTILES]
    buckets = [
        (key, bucket_text(bounds), bounds)
        for key, bounds in shown
        if isinstance(bounds, dict) and bucket_text(bounds) != "-"
    ]
    if not buckets:
        return f"{label}: the server's histogram held nothing."
    told = []
    groups: dict[str, list[str]] = {}
    for key, text, _ in buckets:
        groups.setdefault(text, []).append(key)
    for text, keys in groups.items():  # below the first bound or past the last: said below
        if len(keys) > 1 and not text.startswith(("below ", "above ")):
            told.append(f"{', '.join(keys)} share one bucket ({text})")
    widest: tuple[float, str] | None = None
    for _, text, bounds in buckets:
        low, high = finite(bounds.get("low_ms")), finite(bounds.get("high_ms"))
        if low and high and low > 0 and (widest is None or high / low > widest[0]):
            widest = (high / low, text)
    if widest is not None:
        told.append(f"the widest bucket shown is {widest[1]} ({widest[0]:.3g}x from low to high)")
    below = [key for key, text, _ in buckets if text.startswith("below ")]
    if below:
        told.append(f"{', '.join(below)} below its first bound: it cannot say how far below")
    above = [key for key, text, _ in buckets if text.startswith("above ")]
    if above:
        told.append(f"{', '.join(above)} past its last bound: it cannot say how far past")
    return f"{label}: {'; '.join(told) if told else 'each percentile in a bucket of its own'}."


def server_own_percentiles(summary: Summary, server: dict[str, object]) -> list[str]:
    """Our ITL and TTFT percentiles beside the server's own (``own_percentiles``)."""
    own = as_dict(server.get("own_percentiles"))
    metrics = as_dict(summary.get("metrics"))
    rows, lines = [], []
    for name, label in OWN_METRICS:
        figures = own.get(name)
        if not isinstance(figures, dict) or not finite(figures.get("count")):
            continue  # the server exports no such histogram, or it held nothing
        ours = as_dict(metrics.get(name))
        rows.append(
            [
                f"{label} ours (ms)",
                count_text(ours.get("count")),
                *(ms_text(ours.get(key)) for key in OWN_PERCENTILES),
            ]
        )
        server_cells = [shown(bucket_text(figures.get(key))) for key in OWN_PERCENTILES]
        rows.append([f"{label} the server's", count_text(figures.get("count")), *server_cells])
        lines.append(coarseness(label, figures))
        if figures.get("reset") is True:
            lines.append(
                f"{label}: the server restarted during the run; its figures count "
                "only the observations since then."
            )
    if not rows:
        return []
    return [
        "<h3>What the server says about itself</h3>",
        table(rows, ["", "count", *OWN_PERCENTILES]),
        note(
            "Ours: every gap as this client read it (HdrHistogram, 3 significant digits). "
            "The server's: its own histogram from the first to the last sample, which keeps "
            "counts per bucket only, so each of its figures is the bucket that percentile "
            "lies in, never a value. What lies between the two is what the network and the "
            "client add to what the server measured, within a bucket's width."
        ),
        *(note(f"How coarse the server's buckets are: {line}") for line in lines),
    ]


# --- the attribution check -----------------------------------------------------------------


def _ratio(value: object) -> str:
    number = finite(value)
    return "n/a" if number is None else f"{number:.2f}"


def attribution_check_parts(check: object) -> list[str]:
    """``summary["attribution_check"]``: precision and recall of our causes on the true
    gaps above the true ITL P99.9 (``report.attribution_check``)."""
    if not isinstance(check, dict):
        return []
    parts = ["<h3>Attribution check: our causes against the simulator's true causes</h3>"]
    if not check.get("available"):
        why = check.get("why")
        return [*parts, f"<p>Unavailable: {shown(why if isinstance(why, str) else '-')}</p>"]
    coverage = as_dict(check.get("coverage"))
    percentile = finite(check.get("percentile"))
    above = "-" if percentile is None else f"{percentile:g}"
    parts.append(
        note(
            f"True gaps above the true ITL P{above} ({ms_text(check.get('threshold_ms'))} ms): "
            f"{count_text(check.get('tail_gaps'))}, of which "
            f"{count_text(coverage.get('present'))} are in our kept gaps."
        )
    )
    parts += _cause_rows(check.get("causes"))
    stated = []
    for row in as_list(check.get("thresholds")):
        row = as_dict(row)
        met = row.get("met")  # a bool; anything else (hand-edited, a list) is n/a
        marks = {True: ("pass", "met"), False: ("fail", "NOT met")}
        mark = marks[met] if isinstance(met, bool) else ("note", "n/a")
        stated.append(
            [
                shown(cause_title(str(row.get("cause", "-")))),
                shown(str(row.get("measure", "-"))),
                _ratio(row.get("at_least")),
                _ratio(row.get("value")),
                f'<span class="{mark[0]}">{mark[1]}</span>',
            ]
        )
    if stated:
        parts.append(table(stated, ["cause", "measure", "at least", "value", "stated"]))
        parts.append(note("Thresholds stated, not enforced: a run does not fail on them."))
    true_tail = as_dict(check.get("true_tail_causes"))
    if true_tail:
        told = ", ".join(
            f"{cause_title(str(name))} {count_text(count)}" for name, count in true_tail.items()
        )
        parts.append(note(f"True causes of those gaps: {told} (causes overlap)."))
    lower = as_dict(check.get("p99"))
    if lower.get("tail_gaps"):
        none = finite(lower.get("ours_none"))
        left = "" if none is None else f"; ours named no cause for {none * 100:.1f} %"
        parts.append(
            note(
                f"Above the true ITL P99 ({ms_text(lower.get('threshold_ms'))} ms): "
                f"{count_text(lower.get('tail_gaps'))} true gaps, "
                f"{count_text(lower.get('present'))} in our kept gaps{left}."
            )
        )
        parts += _cause_rows(lower.get("causes"))
    return parts


def _cause_rows(causes: object) -> list[str]:
    """One row per checked cause: true, tagged by us, both, precision, recall."""
    rows = []
    for cause, row in as_dict(causes).items():
        row = as_dict(row)
        rows.append(
            [
                shown(cause_title(str(cause))),
                count_text(row.get("true")),
                count_text(row.get("tagged")),
                count_text(row.get("both")),
                _ratio(row.get("precision")),
                _ratio(row.get("recall")),
            ]
        )
    if not rows:
        return []
    return [table(rows, ["cause", "true", "tagged by us", "both", "precision", "recall"])]
