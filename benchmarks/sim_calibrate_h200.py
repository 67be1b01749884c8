"""Kernel timings of one Llama-3.1-8B forward step on a GPU, to calibrate the simulator's profile.

Usage (on a machine with an NVIDIA GPU and PyTorch): python benchmarks/sim_calibrate_h200.py
[--out calib.json]

No model weights are needed: every weight matrix of Llama-3.1-8B (32 layers, hidden 4096,
MLP 14336, 32 query / 8 KV heads of 128, vocabulary 128256) is allocated in bf16 with random
values, and a step is what an engine runs per iteration: the projections and the MLP for every
token of the batch, attention (decode: one query per sequence over its cached keys and values;
prefill: causal attention over the chunk), and the LM head for one row per sequence. Each
configuration is captured as a CUDA graph and replayed, so the times are GPU time without
Python launch overhead (a real engine adds its scheduler and sampler on top: the profile's
``step_base_ms`` carries an allowance for that). Prints a table and the fitted step-cost
parameters of ``tpot_locust/sim/profiles.py``; no pass/fail.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

HIDDEN, MLP, LAYERS, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 4096, 14336, 32, 32, 8, 128, 128256
DT = torch.bfloat16


class Weights:
    def __init__(self) -> None:
        def w(rows: int, cols: int) -> torch.Tensor:
            return torch.empty(rows, cols, device="cuda", dtype=DT).normal_(0, 0.02)

        qkv = (HEADS + 2 * KV_HEADS) * HEAD_DIM
        self.layers = [
            (w(HIDDEN, qkv), w(HEADS * HEAD_DIM, HIDDEN), w(HIDDEN, 2 * MLP), w(MLP, HIDDEN))
            for _ in range(LAYERS)
        ]
        self.lm_head = w(HIDDEN, VOCAB)


def mlp_and_proj(weights: Weights, x: torch.Tensor, attend) -> torch.Tensor:
    for wqkv, wo, wgu, wd in weights.layers:
        h = F.rms_norm(x, (HIDDEN,))
        qkv = h @ wqkv
        a = attend(qkv)
        x = x + a @ wo
        h = F.rms_norm(x, (HIDDEN,))
        g, u = (h @ wgu).chunk(2, dim=-1)
        x = x + (F.silu(g) * u) @ wd
    return x


def time_graph(fn, reps: int = 20) -> float:
    """Median ms of a CUDA-graph replay of ``fn`` (NaN, with the error printed, if it fails)."""
    try:
        return _time_graph(fn, reps)
    except Exception as exc:  # noqa: BLE001 - a calibration run reports and goes on
        print(f"  failed: {type(exc).__name__}: {str(exc)[:200]}")
        return float("nan")


def _time_graph(fn, reps: int) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del graph
    return statistics.median(times)


def decode_step(weights: Weights, batch: int, context: int) -> float:
    """Weights read once, one token per sequence, attention over ``context`` cached tokens."""
    x = torch.randn(batch, HIDDEN, device="cuda", dtype=DT)
    k = torch.randn(batch, KV_HEADS, context, HEAD_DIM, device="cuda", dtype=DT)
    v = torch.randn_like(k)

    def attend(qkv: torch.Tensor) -> torch.Tensor:
        q = qkv[:, : HEADS * HEAD_DIM].view(batch, HEADS, 1, HEAD_DIM)
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        return out.reshape(batch, HEADS * HEAD_DIM)

    def step() -> None:
        h = mlp_and_proj(weights, x, attend)
        _ = h @ weights.lm_head

    return time_graph(step)


def prefill_step(weights: Weights, tokens: int) -> float:
    """One prompt of ``tokens`` tokens prefilled whole (causal attention), one LM-head row."""
    x = torch.randn(tokens, HIDDEN, device="cuda", dtype=DT)

    def attend(qkv: torch.Tensor) -> torch.Tensor:
        q = qkv[:, : HEADS * HEAD_DIM].view(1, tokens, HEADS, HEAD_DIM).transpose(1, 2)
        kv = qkv[:, HEADS * HEAD_DIM :].view(1, tokens, 2 * KV_HEADS, HEAD_DIM).transpose(1, 2)
        k, v = kv[:, :KV_HEADS], kv[:, KV_HEADS:]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return out.transpose(1, 2).reshape(tokens, HEADS * HEAD_DIM)

    def step() -> None:
        h = mlp_and_proj(weights, x, attend)
        _ = h[-1:] @ weights.lm_head

    return time_graph(step)


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - slope * mx, slope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write the measurements as JSON here")
    args = parser.parse_args()
    t0 = time.time()
    torch.manual_seed(0)
    weights = Weights()
    torch.cuda.synchronize()
    result: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    print(f"{result['device']}, torch {result['torch']}, weights ready in {time.time() - t0:.1f}s")

    decode = {}
    for batch in (1, 8, 32, 64, 128, 256, 512):
        decode[batch] = decode_step(weights, batch, 16)
        print(f"decode batch {batch:4d} ctx 16    : {decode[batch]:8.3f} ms")
    kv = {}
    for batch, context in ((64, 1024), (64, 4096), (256, 1024), (256, 2048)):
        kv[(batch, context)] = decode_step(weights, batch, context)
        print(f"decode batch {batch:4d} ctx {context:<5d}: {kv[(batch, context)]:8.3f} ms")
    prefill = {}
    for tokens in (512, 1024, 2048, 4096, 8192, 16384):
        prefill[tokens] = prefill_step(weights, tokens)
        print(f"prefill {tokens:6d} tokens     : {prefill[tokens]:8.3f} ms")

    base, per_seq = fit([b for b in decode if b <= 256], [decode[b] for b in decode if b <= 256])
    kv_per_k = statistics.fmean(
        (ms - decode[b]) / (b * (c - 16) / 1000) for (b, c), ms in kv.items()
    )
    _, per_token = fit([1024, 2048, 4096, 8192], [prefill[t] for t in (1024, 2048, 4096, 8192)])
    fitted = {
        "weights_step_ms": round(base, 3),
        "decode_ms_per_seq": round(per_seq, 5),
        "kv_read_ms_per_ktoken": round(kv_per_k, 5),
        "prefill_ms_per_token": round(per_token, 5),
    }
    print("fitted:", json.dumps(fitted))
    result.update(
        decode_ms={str(k): v for k, v in decode.items()},
        decode_kv_ms={f"{b}x{c}": v for (b, c), v in kv.items()},
        prefill_ms={str(k): v for k, v in prefill.items()},
        fitted=fitted,
        seconds=round(time.time() - t0, 1),
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
