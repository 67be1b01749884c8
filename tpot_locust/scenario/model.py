"""Scenario files: the model of a whole test, loaded and validated before anything starts.

``schema`` checks every key (unknown keys are errors, every error names file, line,
column and key path), ``loader`` reads a file with its ``--set`` overrides; this module
holds the validated model.
See ``scenarios/README.md`` for the language.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from tpot_locust.scenario.datasets import Conversation
from tpot_locust.scenario.limits import DEFAULT_METRICS_INTERVAL_S
from tpot_locust.scenario.parsed_values import OrZero, ParsedDistribution, fixed
from tpot_locust.scenario.slo import SloSpec
from tpot_locust.scenario.trace import TraceRequest
from tpot_locust.scenario.yaml_source import ScenarioError

__all__ = [
    "Burst",
    "Scenario",
    "ScenarioError",
    "Server",
    "Simulator",
    "Stage",
    "StageSpec",
    "BurstSpec",
    "Sweep",
    "Timeouts",
    "TrafficClass",
    "scenario_keys",
]


def key(
    default: object = None,
    *,
    check: str,
    user: str | None = None,
    flag: str | None = None,
    factory: Callable[[], object] | None = None,
    name: str | None = None,
    required: bool = False,
) -> Any:
    """A scenario key: its default, the check ``schema`` runs on it (by name: ``CHECKS``;
    what the check returns, the value parsed once, is the field's value), the user-class
    attribute it sets to that value (``user``), the simulator flag it becomes (``flag``)
    and its name in YAML when that is not the field's (``name``). Adding a key to a section
    is adding one of these."""
    metadata = {"check": check, "user": user, "flag": flag, "name": name}
    if required:
        return field(metadata=metadata)
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def scenario_keys(section: type) -> dict[str, dict[str, Any]]:
    """The keys a section allows (their YAML names), each with its metadata (``key``) and
    the ``field`` that holds it."""
    return {
        f.metadata["name"] or f.name: {**f.metadata, "field": f.name}
        for f in fields(section)
        if "check" in f.metadata
    }


@dataclass
class Timeouts:
    """``server.timeouts``: seconds, each the ``ChatUser`` attribute it sets."""

    connect: float | None = key(check="positive", user="connect_timeout")
    first_token: float | None = key(check="positive", user="first_token_timeout")
    idle: float | None = key(check="positive", user="idle_timeout")
    total: float | None = key(check="positive", user="total_timeout")


@dataclass
class Tls:
    """``server.tls``: how an https server is trusted (an internal cluster's own CA)."""

    ca: str | None = key(check="ca_file", user="tls_ca")  # PEM file of the CA(s) to trust
    verify: bool | None = key(check="flag", user="tls_verify")  # false: trust any certificate


@dataclass
class Server:
    """``server``: the server under test and how requests are made; None keeps the user
    class's default."""

    host: str | None = key(check="url")
    api: str = key("chat", check="api")
    model: str | None = key(check="text", user="model")
    headers: dict[str, object] | None = key(check="headers", user="headers")
    api_key_env: str | None = key(check="env_name", user="api_key_env")
    ignore_eos: bool | None = key(check="flag", user="ignore_eos")
    min_tokens: bool | None = key(check="flag", user="force_min_tokens")
    include_usage: bool | None = key(check="flag", user="include_usage")
    extra_body: dict[str, object] | None = key(check="mapping", user="extra_body")
    # one SSE event or NDJSON line at most; a larger one fails its request (oversized_event)
    max_event_bytes: int | None = key(check="event_bytes", user="max_event_bytes")
    # a local tokenizer (tokenizer.json or a folder with one): prompts of exact token counts;
    # the embedded simulator counts with it too
    tokenizer: str | None = key(check="tokenizer", user="tokenizer")
    timeouts: Timeouts = key(check="timeouts", factory=Timeouts)
    tls: Tls = key(check="tls", factory=Tls)
    # the server's Prometheus endpoint, sampled while the run goes: a URL, true (the
    # default: <host>/metrics) or false (off); every metrics_interval seconds
    metrics: bool | str = key(True, check="metrics_url")
    metrics_interval: float = key(DEFAULT_METRICS_INTERVAL_S, check="metrics_interval")
    # the GPUs' own state: DCGM exporters' endpoints by label, sampled as ``metrics`` is
    gpu_metrics: dict[str, str] = key(check="gpu_metrics", factory=dict)

    def gpu_metrics_urls(self, host: str | None) -> dict[str, str]:
        """``gpu_metrics`` by label, a path on ``host`` made a URL (left out with no host)."""
        urls = {}
        for label, url in self.gpu_metrics.items():
            if url.startswith("/"):
                parts = urlsplit(host or "")
                if not parts.scheme or not parts.netloc:
                    continue
                url = urlunsplit((parts.scheme, parts.netloc, url, "", ""))
            urls[label] = url
        return urls

    def metrics_url(self, host: str | None) -> str | None:
        """The metrics URL to sample for a run against ``host`` (the run's base URL: the
        scenario's, ``--host`` or the embedded simulator's), or None: turned off, or no
        host to take the default from. The default is the host's scheme and address with
        the path ``/metrics`` (an OpenAI base URL's ``/v1`` is not part of it)."""
        if self.metrics is False:
            return None
        if isinstance(self.metrics, str):
            return self.metrics
        if not host:
            return None
        parts = urlsplit(host)
        if not parts.scheme or not parts.netloc:
            return None
        return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


@dataclass
class Simulator:
    """``simulator``: the embedded server's arguments, each the flag it becomes."""

    ttft_ms: ParsedDistribution | None = key(check="distribution", flag="--ttft-ms")
    gap_ms: ParsedDistribution | None = key(check="distribution", flag="--gap-ms")
    natural_tokens: ParsedDistribution | None = key(check="distribution", flag="--natural-tokens")
    seed: int | None = key(check="seed", flag="--seed")  # default: the scenario's seed
    model: str | None = key(check="text", flag="--model")
    profile: str | None = key(check="profile", flag="--profile")  # a name or a file path
    prefix_cache: bool | None = key(check="flag", flag="--prefix-cache")  # sim.prefix_cache
    # reasoning tokens before each answer, drawn per request: 0 (none) or a distribution
    reasoning_tokens: OrZero | None = key(check="distribution_or_zero", flag="--reasoning-tokens")
    # a non-token event of filler_bytes after every filler_every-th token (sim.chunks)
    filler_bytes: int | None = key(check="count", flag="--filler-bytes")
    filler_every: int | None = key(check="positive_integer", flag="--filler-every")
    engine: dict[str, object] = key(check="mapping", factory=dict)  # --set KEY=VALUE each


@dataclass
class TrafficClass:
    """One entry of ``classes``: a ``ChatUser`` subclass (closed loop) or an open-loop
    session source; ``user`` says which attribute of the class a key sets."""

    name: str
    users: int = key(0, check="count")  # closed loop: concurrent sessions
    rate: float | None = key(check="rate")  # open loop: sessions started per second
    arrival: str = key("poisson", check="arrival")  # poisson | gamma | constant
    # gamma shape: 1 = Poisson, < 1 burstier, > 1 more even
    burstiness: float = key(1.0, check="positive")
    max_in_flight: int = key(256, check="positive_integer")
    prompt_tokens: ParsedDistribution = key(fixed(256), check="distribution", user="prompt_tokens")
    followup_tokens: ParsedDistribution | None = key(
        None, check="distribution", user="followup_tokens"
    )
    output_tokens: ParsedDistribution = key(fixed(128), check="distribution", user="output_tokens")
    turns: int = key(1, check="positive_integer", user="turns")
    think_time: OrZero = key(0.0, check="time", user="think_time")
    wait_time: OrZero = key(0.0, check="wait", user="wait_time")  # Locust's wait_time
    shared_prefix_tokens: int = key(0, check="tokens", user="shared_prefix_tokens")
    shared_prefix_ratio: float = key(1.0, check="ratio", user="shared_prefix_ratio")
    # the model (or LoRA adapter) of its requests, or several with weights: {a: 3, b: 1}
    # sends three conversations in four to a; the figures are kept per model as well
    model: dict[str, float] | None = key(check="model_split", user="model_split")
    # prompts from a local file (JSONL, CSV, ShareGPT JSON: scenario.datasets), each entry
    # a session, read by the check; in ``dataset_order`` (random: seeded sampling;
    # sequential: in file order)
    dataset: tuple[Conversation, ...] = key((), check="dataset", user="dataset")
    dataset_order: str = key("random", check="dataset_order", user="dataset_order")
    # open loop: a trace replayed as timed, a file name (our JSONL) or ``TraceSpec``
    trace: TraceSpec | None = key(check="trace")
    speedup: float = key(1.0, check="positive")  # 2 replays the trace twice as fast
    trace_requests: list[TraceRequest] = field(
        default_factory=list, repr=False
    )  # the trace's lines

    @property
    def open_loop(self) -> bool:
        return self.rate is not None or self.trace is not None

    @property
    def replayed(self) -> bool:
        return self.trace is not None


@dataclass
class TraceSpec:
    """``classes.<name>.trace``: a request trace, ours or as its publisher ships it
    (``scenario.trace_formats``), and what of it to replay."""

    file: str = key("", check="trace_file")  # required (scenario.schema says so)
    format: str = key("auto", check="trace_format")  # auto: told by its first row
    start: float = key(0.0, check="duration_or_zero")  # seconds into the trace to begin at
    duration: float | None = key(check="duration_key")  # seconds of it (None: to its end)
    max_requests: int | None = key(check="positive_integer")  # the first N in time order
    scale_input: float = key(1.0, check="positive")  # prompt lengths (and blocks) x this
    scale_output: float = key(1.0, check="positive")  # output lengths x this
    model: str | None = key(check="text")  # BurstGPT: only this Model's rows
    log_type: str | None = key(check="text")  # BurstGPT: only this Log Type's rows


@dataclass
class Sweep:
    """``sweep``: one load variable stepped over ``values`` (or doubled from ``start`` up to
    ``limit``), each step a run of ``step_duration`` with ``warmup``; ``tpot-locust sweep``
    stops at the first step that breaks the scenario's SLOs."""

    vary: str = key("users", check="sweep_variable")  # users | rate | speedup
    class_name: str | None = key(check="text", name="class")  # the class it applies to
    values: list[float] | None = key(check="sweep_values")
    start: float | None = key(check="positive")
    limit: float | None = key(check="positive")  # doubling stops past it
    step_duration: float | None = key(check="duration")  # default: the scenario's duration
    warmup: float | None = key(check="duration_or_zero")  # default: the scenario's warm-up

    def steps(self) -> list[float]:
        if self.values is not None:
            return list(self.values)
        assert self.start is not None and self.limit is not None
        steps, value = [], self.start
        while value <= self.limit:
            steps.append(value)
            value *= 2
        return steps


@dataclass
class StageSpec:
    """One entry of ``stages`` as written; ``Stage`` is what it becomes."""

    duration: float | None = key(check="duration")  # required
    users: int | None = key(check="count")  # total closed-loop users from here on
    rate: dict[str, object] | None = key(check="part")  # open-loop class -> sessions per second


@dataclass
class BurstSpec:
    """One entry of ``bursts`` as written; ``Burst`` is what it becomes."""

    class_name: str | None = key(check="part", name="class")  # must name a class
    count: int = key(1, check="positive_integer")
    at: object = key(check="part")  # a time or a list of times ...
    every: float | None = key(check="duration")  # ... or a period
    start: float | None = key(check="duration_or_zero")  # with every; default: every
    prompt_tokens: ParsedDistribution | None = key(check="distribution")
    output_tokens: ParsedDistribution | None = key(check="distribution")


@dataclass(frozen=True)
class Stage:
    duration_s: float
    users: int | None  # total closed-loop users during the stage
    rates: dict[str, float]  # open-loop class -> sessions per second during the stage


@dataclass(frozen=True)
class Burst:
    """``count`` requests of ``class_name`` sent together at each time in ``times_s``."""

    class_name: str
    count: int
    times_s: tuple[float, ...]
    prompt_tokens: ParsedDistribution | None = None
    output_tokens: ParsedDistribution | None = None


@dataclass
class Scenario:
    """The whole file. A key whose check is ``part`` is parsed by its own code in
    ``schema`` (sections, and keys with rules between them); the others are checked by
    their ``check`` alone, so adding such a key is adding its field here."""

    source: str  # the file
    name: str = key(check="name", required=True)  # default: the file's name
    duration_s: float = key(check="part", name="duration", required=True)  # or the stages'
    classes: list[TrafficClass] = key(check="part", required=True)
    spawn_rate: float | None = key(check="positive")
    seed: int | None = key(check="seed")
    repeat: int | None = key(check="positive_integer")  # runs, each seed one more (cli.repeat)
    output: str | None = key(check="output")
    server: Server = key(check="part", factory=Server)
    simulator: Simulator = key(check="part", factory=Simulator)
    slo: SloSpec = key(check="part", factory=SloSpec)
    description: str = key("", check="text")
    stages: list[Stage] = key(check="part", factory=list)
    bursts: list[Burst] = key(check="part", factory=list)
    warmup_s: float = key(0.0, check="duration_or_zero", name="warmup")
    cooldown_s: float = key(0.0, check="duration_or_zero", name="cooldown")
    # a graceful stop: requests in flight at the stop may finish this long, for their E2E
    # (Locust's --stop-timeout; k6's gracefulStop); their gaps after the stop do not count
    stop_timeout_s: float = key(5.0, check="whole_seconds", name="stop_timeout")
    sweep: Sweep | None = key(check="part")

    @property
    def base_dir(self) -> Path:
        return Path(self.source).parent

    @property
    def host(self) -> str | None:
        return self.server.host

    @property
    def users(self) -> int:
        """Closed-loop users at the start (what Locust spawns without stages)."""
        return sum(traffic.users for traffic in self.classes)

    @property
    def max_users(self) -> int:
        stage_users = [stage.users for stage in self.stages if stage.users is not None]
        return max([self.users, *stage_users])

    def traffic_class(self, name: str) -> TrafficClass:
        return next(traffic for traffic in self.classes if traffic.name == name)
