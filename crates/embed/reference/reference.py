#!/usr/bin/env python3
"""Reference vectors of all-MiniLM-L6-v2 for crates/embed/tests/reference.rs.

An independent forward pass in plain numpy over the model's own model.safetensors (no torch,
no sentence-transformers, no candle), doing what sentence-transformers does for this model:
tokenize with the model's tokenizer.json (the Python `tokenizers` package) truncated at 256
word pieces including [CLS] and [SEP], run the 6 BERT layers in float64, mean-pool the last
hidden states over the attention mask, L2-normalise. Each sentence is run alone, so no padding
is involved here; the Rust side's batching and padding are what the comparison checks.

Usage: python3 reference.py MODEL_DIR > ../tests/fixtures/reference.json
Needs: numpy, safetensors, tokenizers (pip install numpy safetensors tokenizers).
"""

import json
import math
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

MAX_WORD_PIECES = 256  # sentence_bert_config.json's max_seq_length

SENTENCES = [
    "How do I keep a transaction from changing data?",
    "SET TRANSACTION sets the characteristics of the current transaction.",
    "PostgreSQL",
    "Ünïcödé, ponctuation — «guillemets», naïve café; 日本語のテキスト 🐘!?",
    "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction';",
    # Longer than 256 word pieces: checks truncation.
    " ".join(
        f"Sentence {i}: the write-ahead log records every change before the data files do."
        for i in range(40)
    ),
]


def layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def gelu(x):
    # The exact (erf) GELU BERT uses.
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


def embed(weights, config, ids):
    w = lambda name: weights[name].astype(np.float64)  # noqa: E731
    eps = config["layer_norm_eps"]
    heads = config["num_attention_heads"]
    n = len(ids)
    x = (
        w("embeddings.word_embeddings.weight")[ids]
        + w("embeddings.position_embeddings.weight")[np.arange(n)]
        + w("embeddings.token_type_embeddings.weight")[np.zeros(n, dtype=np.int64)]
    )
    x = layer_norm(x, w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"), eps)
    hidden = x.shape[-1]
    size = hidden // heads
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        lin = lambda name, v: v @ w(p + name + ".weight").T + w(p + name + ".bias")  # noqa: E731
        split = lambda v: v.reshape(n, heads, size).transpose(1, 0, 2)  # noqa: E731
        q = split(lin("attention.self.query", x))
        k = split(lin("attention.self.key", x))
        v = split(lin("attention.self.value", x))
        probs = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(size))
        context = (probs @ v).transpose(1, 0, 2).reshape(n, hidden)
        x = layer_norm(
            lin("attention.output.dense", context) + x,
            w(p + "attention.output.LayerNorm.weight"),
            w(p + "attention.output.LayerNorm.bias"),
            eps,
        )
        inner = gelu(lin("intermediate.dense", x))
        x = layer_norm(
            lin("output.dense", inner) + x,
            w(p + "output.LayerNorm.weight"),
            w(p + "output.LayerNorm.bias"),
            eps,
        )
    pooled = x.mean(0)  # every position is a real word piece: no padding here
    return pooled / max(np.linalg.norm(pooled), 1e-12)


def main():
    model_dir = sys.argv[1]
    with open(f"{model_dir}/config.json") as f:
        config = json.load(f)
    weights = load_file(f"{model_dir}/model.safetensors")
    # Some exports prefix every name with "bert."; this one does not, but both are accepted.
    weights = {k.removeprefix("bert."): v for k, v in weights.items()}
    tokenizer = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_WORD_PIECES)
    cases = []
    for sentence in SENTENCES:
        ids = tokenizer.encode(sentence).ids
        vector = embed(weights, config, np.array(ids))
        cases.append(
            {
                "text": sentence,
                "word_pieces": len(ids),
                "vector": [round(float(v), 6) for v in vector],
            }
        )
    # One case per line: the fixture diffs by sentence.
    lines = [json.dumps(case, ensure_ascii=False) for case in cases]
    sys.stdout.write(
        '{"model": "all-MiniLM-L6-v2", "generator": "crates/embed/reference/reference.py",\n'
        ' "cases": [\n  ' + ",\n  ".join(lines) + "\n]}\n"
    )

if __name__ == "__main__":
    main()
