#!/usr/bin/python3
"""Exports the trained KJV model for hllm-convert, which writes the bundled GGUF.

Reads the trained float32 weights (models/kjv-llama.weights.bin, the golden format that
train.py writes: magic HLLMGLD1, then named float32 arrays with GGUF tensor names and
nn.Linear [out, in] layout) and the SentencePiece model, and writes them in llama2.c's
version-1 format, which hllm reads natively and whose RoPE layout (pairs 2i, 2i+1) is the one
the model was trained with:

    <out>/kjv-llama.bin      256-byte header ("ak42", version 1, 7 int32 params, shared flag)
                             then float32: attention norms, ffn norms, final norm, embedding,
                             wq, wk, wv, wo, w1 (gate), w2 (down), w3 (up), classifier
    <out>/tokenizer.bin      llama2.c tokenizer: max piece length, then per token its score,
                             length and bytes (spaces as ' ', BOS/EOS as "\\n<s>\\n"/"\\n</s>\\n")

Then:  build/release/examples/hllm-convert -i <out>/kjv-llama.bin \\
           --tokenizer <out>/tokenizer.bin --type f16 -o models/kjv-llama.gguf
(tools/train/run_all.sh does all of it.)
"""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

import sys

import numpy as np
import sentencepiece as spm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference_outputs import read_golden  # noqa: E402  (the golden-format reader, one copy)


def write_llama2c(weights: dict[str, np.ndarray], path: Path) -> None:
    n_layers = int(weights["n_layers"])
    dim = int(weights["dim"])
    params = [dim, int(weights["ffn_dim"]), n_layers, int(weights["n_heads"]),
              int(weights["n_kv_heads"]), int(weights["vocab_size"]), int(weights["context_length"])]
    header = struct.pack("<Ii7iB", 0x616B3432, 1, *params, 0)  # shared_classifier = 0
    header += b"\0" * (256 - len(header))
    layer = lambda name: [weights[f"blk.{l}.{name}.weight"] for l in range(n_layers)]
    tensors = (layer("attn_norm") + layer("ffn_norm") + [weights["output_norm.weight"],
               weights["token_embd.weight"]] + layer("attn_q") + layer("attn_k") + layer("attn_v")
               + layer("attn_output") + layer("ffn_gate") + layer("ffn_down") + layer("ffn_up")
               + [weights["output.weight"]])
    with path.open("wb") as f:
        f.write(header)
        for t in tensors:
            f.write(np.ascontiguousarray(t, dtype="<f4").tobytes())


def write_tokenizer(model: Path, path: Path) -> None:
    sp = spm.SentencePieceProcessor(model_file=str(model))
    pieces, scores = [], []
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        if i == sp.bos_id():
            piece = "\n<s>\n"
        elif i == sp.eos_id():
            piece = "\n</s>\n"
        pieces.append(piece.replace("\u2581", " ").encode("utf-8"))
        scores.append(sp.get_score(i))
    with path.open("wb") as f:
        f.write(struct.pack("<i", max(len(p) for p in pieces)))
        for piece, score in zip(pieces, scores):
            f.write(struct.pack("<fi", score, len(piece)))
            f.write(piece)


def main() -> None:
    root = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", type=Path, default=root / "models/kjv-llama.weights.bin")
    parser.add_argument("--tokenizer", type=Path, default=root / "models/kjv-tokenizer.model")
    parser.add_argument("--out", type=Path, default=Path("/tmp/kjv-train"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    weights = read_golden(args.weights)
    write_llama2c(weights, args.out / "kjv-llama.bin")
    write_tokenizer(args.tokenizer, args.out / "tokenizer.bin")
    print(f"wrote {args.out / 'kjv-llama.bin'} and {args.out / 'tokenizer.bin'}")


if __name__ == "__main__":
    main()
