"""Command line of the simulator (``python -m tpot_locust.sim`` / ``tpot-locust sim``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml

from ..common.checked_numbers import option_number
from ..common.distributions import Distribution, DistributionError, Fixed, parse_distribution
from ..common.tokens import TokenizerError, load_tokenizer
from .profiles import ProfileError, engine_params, parse_assignment, profile_names, profile_text
from .server import SimConfig, serve

MAX_FILLER_BYTES = 1 << 20  # a filler event of at most 1 MiB

READY_PREFIX = "tpot-sim listening on "


def distribution_arg(text: str) -> Distribution:
    """A number or a JSON/YAML mapping such as ``{"dist": "uniform", "min": 1, "max": 3}``."""
    try:
        spec: object = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"not a number or JSON/YAML mapping: {exc}") from None
    try:
        return parse_distribution(spec)
    except DistributionError as exc:
        where = f" ({exc.key})" if exc.key else ""
        raise argparse.ArgumentTypeError(f"bad distribution {text!r}{where}: {exc}") from None


def reasoning_arg(text: str) -> Distribution | None:
    """``--reasoning-tokens``: 0 (none) or a length distribution, as ``distribution_arg``."""
    try:
        if float(text) == 0:
            return None
    except ValueError:
        pass
    return distribution_arg(text)


def build_arg_parser(prog: str = "python -m tpot_locust.sim") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Simulated OpenAI-compatible streaming server (vLLM format) with a "
        "ground-truth log of every token event's send time.",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    whole = {"whole": True}
    add(
        "--port",
        type=option_number(0, 65535, **whole),
        default=8000,
        help="port; 0 picks a free one (default 8000)",
    )
    add("--model", default="tpot-sim", help="model name served (default tpot-sim)")
    add(
        "--adapter",
        dest="adapters",
        action="append",
        default=[],
        metavar="NAME",
        help="a LoRA adapter served beside --model (repeatable); with --profile its requests "
        "share batches by max_loras and load in adapter_load_ms (docs/simulator.md)",
    )
    add(
        "--ttft-ms",
        type=distribution_arg,
        default=None,
        help="time to first token, ms (default 20; not with --profile)",
    )
    add(
        "--gap-ms",
        type=distribution_arg,
        default=None,
        help="gap between tokens, ms (default 2; not with --profile)",
    )
    add(
        "--natural-tokens",
        type=distribution_arg,
        default='{"dist": "lognormal", "mean": 400, "stddev": 200}',
        help="natural output length when ignore_eos is false (default lognormal 400/200)",
    )
    add(
        "--filler-bytes",
        type=option_number(0, MAX_FILLER_BYTES, whole=True),
        default=0,
        metavar="N",
        help="after every --filler-every-th token, a non-token event of N bytes (an SSE "
        "comment, a blank NDJSON line) in the same write, as tool-call arguments, reasoning "
        "summaries or usage objects are sent between tokens (default 0: none)",
    )
    add(
        "--filler-every",
        type=option_number(1, 1_000_000, whole=True),
        default=16,
        metavar="K",
        help="with --filler-bytes: the filler follows every K-th token (default 16)",
    )
    add(
        "--reasoning-tokens",
        type=reasoning_arg,
        default=None,
        metavar="N|SPEC",
        help="reasoning (thinking) tokens before each answer, drawn per request: a number or "
        "a distribution (default 0: none); capped at max_tokens - 1, streamed in the API's "
        "reasoning form (chat: delta.reasoning_content; not completions)",
    )
    add(
        "--default-max-tokens",
        type=option_number(1, 10**7, **whole),
        default=256,
        help="max_tokens when not given",
    )
    add(
        "--seed",
        type=option_number(0, 2**63 - 1, **whole),
        default=0,
        help="seed for timings and natural lengths",
    )
    add("--truth", type=Path, default=None, help="ground-truth JSON-lines file to write")
    add(
        "--truth-loop-sends",
        action="store_true",
        help="the truth's send stamps from the loop, just before each write, not the "
        "kernel's transmit stamps (~5 us less CPU a write; less exact where the server "
        "is held between the two: to compare)",
    )
    add("--ready-file", type=Path, default=None, help="write the URL here once listening")
    add(
        "--prefix-cache",
        action="store_true",
        help="keep a prefix cache as vLLM's (chained hashes of 16-token blocks, the "
        "engine's block_size with --profile): report each request's cached_tokens, and "
        "with --profile prefill only the rest",
    )
    add(
        "--tokenizer",
        type=Path,
        default=None,
        metavar="PATH",
        help="count prompt tokens with this tokenizer (tokenizer.json or a folder with one; "
        "the tokenizers package) instead of as whitespace-separated words",
    )
    engine = parser.add_argument_group(
        "engine mode",
        "With --profile, one scheduler loop batches all requests (continuous batching, "
        "prefill/decode interference, KV cache, stalls) instead of independent gaps.",
    )
    add = engine.add_argument
    add(
        "--profile",
        default=None,
        metavar="NAME|FILE",
        help="engine profile: "
        f"{', '.join(profile_names())}, or a YAML file (may say 'extends: NAME')",
    )
    add(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a profile key (repeatable), e.g. --set step_base_ms=6",
    )
    for flag, key, kind in (
        ("--max-num-seqs", "max_num_seqs", option_number(1, 10**7, whole=True)),
        ("--max-num-batched-tokens", "max_num_batched_tokens", option_number(1, 10**9, whole=True)),
        ("--kv-cache-tokens", "kv_cache_tokens", option_number(1, 10**12, whole=True)),
        ("--max-model-len", "max_model_len", option_number(1, 10**9, whole=True)),
        ("--stall-prob", "stall_prob", option_number(0, 1)),
    ):
        add(flag, dest=key, type=kind, default=None, help=f"same as --set {key}=N")
    add(
        "--stall-ms",
        dest="stall_ms",
        type=distribution_arg,
        default=None,
        help="stall duration distribution, ms (same as --set stall_ms=SPEC)",
    )
    add(
        "--chunked-prefill",
        dest="chunked_prefill",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="split prompts into chunks that share steps with decodes",
    )
    add(
        "--steps",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the engine's step lines here instead of into the truth file",
    )
    add(
        "--timer-lead-us",
        type=option_number(0, 1_000_000, whole=True),
        default=1000,
        metavar="US",
        help="wake up to US early before each step's end and spin to it (precise step times "
        "on a VM; 0: no spinning, steps late by the wake-up delay). Default 1000",
    )
    add(
        "--tls-cert",
        type=Path,
        default=None,
        metavar="PEM",
        help="serve https with this certificate (chain); with --tls-key",
    )
    add("--tls-key", type=Path, default=None, metavar="PEM", help="the certificate's key")
    add("--list-profiles", action="store_true", help="list the shipped profiles and exit")
    add("--show-profile", metavar="NAME", help="print a shipped profile's YAML and exit")
    return parser


ENGINE_FLAGS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_tokens",
    "max_model_len",
    "stall_prob",
    "stall_ms",
    "chunked_prefill",
)


def write_ready_file(path: Path, url: str) -> None:
    """Atomically (temp file + rename) so a reader never sees a partial URL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(url + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """Raises ``ValueError`` (``ProfileError``) for a bad engine setup."""
    engine = None
    flags = [k for k in ENGINE_FLAGS if getattr(args, k) is not None]
    if args.profile is None:
        if flags or args.overrides or args.steps is not None:
            raise ProfileError("--set, --steps and the engine flags need --profile")
    else:
        given = [f for f, v in (("--ttft-ms", args.ttft_ms), ("--gap-ms", args.gap_ms)) if v]
        if given:
            raise ProfileError(
                f"{' and '.join(given)} cannot be used with --profile: the engine's step "
                "times decide TTFT and gaps (change the profile's cost keys instead)"
            )
        overrides = dict(parse_assignment(text) for text in args.overrides)
        overrides.update({k: getattr(args, k) for k in flags})
        engine = engine_params(args.profile, overrides)
    return SimConfig(
        host=args.host,
        port=args.port,
        model=args.model,
        adapters=tuple(dict.fromkeys(name for name in args.adapters if name != args.model)),
        ttft_ms=args.ttft_ms or Fixed(20.0),
        gap_ms=args.gap_ms or Fixed(2.0),
        natural_tokens=args.natural_tokens,
        seed=args.seed,
        default_max_tokens=args.default_max_tokens,
        truth_path=args.truth,
        truth_kernel_sends=not args.truth_loop_sends,
        engine=engine,
        steps_path=args.steps,
        timer_lead_us=max(0, args.timer_lead_us),
        tokenizer_path=args.tokenizer,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        prefix_cache=args.prefix_cache,
        reasoning_tokens=args.reasoning_tokens,
        filler_bytes=args.filler_bytes,
        filler_every=args.filler_every,
    )


def _announcer(ready_file: Path | None) -> Callable[[str], None]:
    def announce(url: str) -> None:
        if ready_file is not None:
            write_ready_file(ready_file, url)
        print(READY_PREFIX + url, flush=True)

    return announce


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the simulator until SIGTERM/SIGINT; returns the exit status (0 on a clean stop).
    ``prog``: the command as the user typed it (``tpot-locust sim``), for help and errors."""
    parser = build_arg_parser(prog) if prog else build_arg_parser()
    args = parser.parse_args(argv)
    if args.default_max_tokens < 1:
        print("--default-max-tokens must be >= 1", file=sys.stderr)
        return 2
    try:
        if args.list_profiles:
            for name in profile_names():
                print(f"{name}: {engine_params(name).description}")
            return 0
        if args.show_profile:
            print(profile_text(args.show_profile), end="")
            return 0
        config = config_from_args(args)
        if (args.tls_cert is None) != (args.tls_key is None):
            raise ProfileError("--tls-cert and --tls-key go together")
        if args.tokenizer:  # loaded (and cached) now: a bad one is a usage error, one line
            load_tokenizer(args.tokenizer)
    except (ProfileError, TokenizerError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config, _announcer(args.ready_file)))
    except OSError as exc:  # e.g. port in use, truth file not writable, a bad certificate
        print(f"tpot-sim: {exc}", file=sys.stderr)
        return 1
    return 0
