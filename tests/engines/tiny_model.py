"""Build a tiny Llama-shaped model and its tokenizer, locally and the same every time.

Run with an engine environment's python (it needs torch, transformers and tokenizers):
``python tests/engines/tiny_model.py OUT_DIR``. No network: the tokenizer is a 4,096-token
byte-level BPE trained on Python's own standard library sources (sorted, one thread), the
weights are random from a fixed seed.

The output length is forced by the weights, not by request fields (``transformers serve``
refuses ``ignore_eos``/``min_tokens``): special tokens and tokens that decode to anything
but printable text (newlines, partial UTF-8) can never be sampled, so every request
generates exactly ``max_tokens`` tokens, one streamed chunk each, under any sampler. How:
one hidden dimension of the residual stream is held at a constant (the embedding sets it,
no layer writes to it), so after the final norm it is always positive; the output rows of
the banned tokens read only that dimension, with a large negative weight.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # BPE training in one thread: same merges
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VOCAB_SIZE = 4096
HIDDEN = 256
LAYERS = 4
HEADS = 4
MAX_POSITIONS = 4096
SEED = 0
CONSTANT_DIM = 0  # the residual-stream dimension held constant
CONSTANT = 1.0
BANNED_WEIGHT = -100.0  # banned logits: -100 x (that dimension after the norm, >= ~1)
SPECIAL = ["<s>", "</s>", "<unk>", "<pad>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)
TRAINING_FILES = 400  # the first standard-library modules, sorted by path
BUILD_VERSION = 1  # bump when anything above changes: cached models are rebuilt


def training_files() -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return [str(p) for p in sorted(stdlib.glob("*.py"))[:TRAINING_FILES]]


def build_tokenizer(out: Path):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train(
        training_files(),
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL,
        show_progress=False,
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.model_max_length = MAX_POSITIONS
    tokenizer.save_pretrained(out)
    return tokenizer


def banned_ids(tokenizer) -> list[int]:
    """Special tokens, and tokens whose text is empty, not printable or partial UTF-8."""
    banned = []
    for token_id in range(len(tokenizer)):
        text = tokenizer.decode([token_id])
        special = token_id in tokenizer.all_special_ids
        if special or not text or not text.isprintable() or "\ufffd" in text:
            banned.append(token_id)
    return banned


def build_model(out: Path, tokenizer) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    banned = shape_answers(model, tokenizer)
    model.save_pretrained(out, safe_serialization=True)
    (out / "tiny-model.json").write_text(
        json.dumps(
            {"build_version": BUILD_VERSION, "vocab": len(tokenizer), "banned_tokens": len(banned)}
        )
        + "\n"
    )


def shape_answers(model, tokenizer) -> list[int]:
    """The weight trick on a Llama built anywhere (here, or on a GPU by
    benchmarks/gpu/build_model.py): one hidden dimension carries a constant no layer reads
    or writes, and the head turns it into a large negative logit for every banned token,
    so greedy answers never end early; greedy generation. Returns the banned ids."""
    import torch
    from transformers import GenerationConfig

    banned = banned_ids(tokenizer)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, CONSTANT_DIM] = CONSTANT
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[CONSTANT_DIM, :] = 0.0  # no layer writes to it
            layer.mlp.down_proj.weight[CONSTANT_DIM, :] = 0.0
            layer.input_layernorm.weight[CONSTANT_DIM] = 0.0  # nor reads it
            layer.post_attention_layernorm.weight[CONSTANT_DIM] = 0.0
        model.model.norm.weight[CONSTANT_DIM] = 1.0
        head = model.lm_head.weight
        head[:, CONSTANT_DIM] = 0.0
        head[banned, :] = 0.0
        head[banned, CONSTANT_DIM] = BANNED_WEIGHT
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    return banned


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out)
    build_model(out, tokenizer)
    print(f"tiny model in {out}")


if __name__ == "__main__":
    main(sys.argv[1])
