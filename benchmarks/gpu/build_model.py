"""Build a random-weight Llama-shaped model (~2.84 B parameters) on the GPU, for a real
`transformers serve` under test: ``python3 benchmarks/gpu/build_model.py OUT_DIR``.

The recipe is tests/engines/tiny_model.py's, at a larger size: its tokenizer (the 4,096-token
byte-level BPE trained on this Python's standard library), random weights from a fixed seed,
and its weight trick (one residual dimension held constant; special and non-printable tokens
read only that dimension with a large negative weight), so every answer is exactly
``max_tokens`` long under any sampler. Shape of run 1 in the GPU note: hidden 3072, 28
layers, 24 heads, 8 key-value heads, MLP 8192 (Llama-3.2-3B's), 2.84 B parameters.
Initialised on the GPU in bfloat16 (seconds), saved as safetensors (~5.7 GB).

Needs torch (CUDA), transformers and tokenizers; run from the repository root (it imports
``tests.engines.tiny_model``). Environment overrides: GPU_MODEL_HIDDEN, GPU_MODEL_LAYERS,
GPU_MODEL_HEADS, GPU_MODEL_KV_HEADS, GPU_MODEL_MLP, GPU_MODEL_MAX_POSITIONS, and
GPU_MODEL_DEVICE=cpu (with a small shape) to try the script out without a GPU.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # the tiny model's tokenizer: same merges
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from tests.engines import tiny_model  # noqa: E402

HIDDEN = int(os.environ.get("GPU_MODEL_HIDDEN", "3072"))
LAYERS = int(os.environ.get("GPU_MODEL_LAYERS", "28"))
HEADS = int(os.environ.get("GPU_MODEL_HEADS", "24"))
KV_HEADS = int(os.environ.get("GPU_MODEL_KV_HEADS", "8"))
MLP = int(os.environ.get("GPU_MODEL_MLP", "8192"))
# 8,000-token burst prompts + 512-token answers need more than the tiny model's 4,096
MAX_POSITIONS = int(os.environ.get("GPU_MODEL_MAX_POSITIONS", "16384"))
DEVICE = os.environ.get("GPU_MODEL_DEVICE", "cuda")  # "cpu" only to try the script out


def log(message: str) -> None:
    print(f"[build_model {time.strftime('%H:%M:%S')}] {message}", flush=True)


def build(out: Path) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    started = time.monotonic()
    tokenizer = tiny_model.build_tokenizer(out)
    tokenizer.model_max_length = MAX_POSITIONS
    tokenizer.save_pretrained(out)
    banned = tiny_model.banned_ids(tokenizer)
    log(
        f"tokenizer: {len(tokenizer)} tokens, {len(banned)} banned, "
        f"{time.monotonic() - started:.1f} s"
    )

    torch.manual_seed(tiny_model.SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=MLP,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    t0 = time.monotonic()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(DEVICE):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(torch.float32)
    if next(model.parameters()).dtype != torch.bfloat16:  # rotary buffers stay float32
        model = model.to(torch.bfloat16)
    model = model.to(DEVICE).eval()
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()
    params = sum(p.numel() for p in model.parameters())
    where = torch.cuda.get_device_name(0) if DEVICE.startswith("cuda") else DEVICE
    log(
        f"model: {params / 1e9:.3f} B parameters initialised on {where} "
        f"in {time.monotonic() - t0:.1f} s"
    )

    tiny_model.shape_answers(model, tokenizer)  # answers of max_tokens (banned: above)

    # the trick holds: a short greedy answer has only allowed tokens, never the end token
    t0 = time.monotonic()
    ids = tokenizer("user: hello\nassistant:", return_tensors="pt")["input_ids"].to(DEVICE)
    with torch.no_grad():
        answer = model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, do_sample=False
        )
    new = answer[0, ids.shape[1] :].tolist()
    bad = sorted(set(new) & set(banned))
    log(
        f"check: {len(new)} tokens generated, banned among them: {bad or 'none'}, "
        f"{time.monotonic() - t0:.1f} s: {tokenizer.decode(new)[:120]!r}"
    )
    if len(new) != 32 or bad:
        raise SystemExit("the weight trick failed: answers would not be max_tokens long")

    t0 = time.monotonic()
    model.save_pretrained(out)
    size = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    log(f"saved {size / 1e9:.2f} GB of safetensors in {time.monotonic() - t0:.1f} s")
    info = {
        "parameters": params,
        "hidden": HIDDEN,
        "layers": LAYERS,
        "heads": HEADS,
        "kv_heads": KV_HEADS,
        "mlp": MLP,
        "max_positions": MAX_POSITIONS,
        "vocab": len(tokenizer),
        "banned_tokens": len(banned),
        "dtype": "bfloat16",
        "build_s": round(time.monotonic() - started, 1),
    }
    (out / "gpu-model.json").write_text(json.dumps(info) + "\n")
    return info


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = build(out)
    log(f"model in {out}: {json.dumps(info)}")


if __name__ == "__main__":
    main(sys.argv[1])
