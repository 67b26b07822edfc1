#!/usr/bin/env python3
"""Write the small checkpoints that tests/test_formats.cpp loads, with their golden logits.

    tools/setup_python.sh && .venv-tools/bin/python tools/gen_format_fixtures.py

Writes tests/goldens/formats/:
  hf/            config.json, model.safetensors (float32) and logits.bin: a tiny random
                 LlamaForCausalLM saved by transformers' save_pretrained, logits from HF in float64
  hf-sharded/    the same model saved with a small max_shard_size: shards + index json
  hf-bf16/       a tied-embedding variant stored in bfloat16 (norms too, so the loader must
                 convert them), logits from HF in float64 on the bf16-rounded weights
  llama2c-v0.bin legacy llama2.c checkpoint (7 int32 header, unshared classifier), and
  llama2c-v1.bin version-1 ("ak42") checkpoint (shared classifier), written byte for byte as
                 llama2.c's export.py legacy_export / version1_export write them, with
  llama2c-v0.logits.bin / llama2c-v1.logits.bin from a textbook float64 forward that
                 rotates (2i, 2i+1) pairs as llama2.c's run.c does
  tokenizer.bin  a tiny llama2.c tokenizer (export of a SentencePiece-style vocabulary)

Everything is seeded, so running the script again rewrites identical files.
Golden format (tests/golden_file.hpp): "HLLMGLD1", u32 count, then per entry u32 name length,
name, u32 rank, rank x u64 dims, float32 data.
"""
import copy
import os
import shutil
import struct

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "goldens", "formats")
N_TOKENS = 20


def write_golden(path, entries):
    with open(path, "wb") as f:
        f.write(b"HLLMGLD1")
        f.write(struct.pack("<I", len(entries)))
        for name, array in entries:
            a = np.asarray(array, dtype=np.float32)
            f.write(struct.pack("<I", len(name)))
            f.write(name.encode())
            f.write(struct.pack("<I", a.ndim))
            for d in a.shape:
                f.write(struct.pack("<Q", d))
            f.write(a.tobytes())


# ---------------------------------------------------------------------------------------------
# Hugging Face


def hf_model(tie, seed):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
                         max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=tie, torch_dtype="float32")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    # transformers initialises with std 0.02, which gives logits near zero: use the scales of a
    # trained model instead (embedding N(0,1), projections N(0,1/fan_in), norms 1 + N(0,0.1^2)),
    # so that the logits are O(1) and a mistake anywhere shows.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return model


def hf_logits(model, tokens):
    m64 = model.to(torch.float64)
    with torch.no_grad():
        return m64(torch.tensor([tokens])).logits[0].numpy()


def write_hf(tokens):
    model = hf_model(tie=False, seed=1)
    for sub in ("hf", "hf-sharded", "hf-bf16"):
        shutil.rmtree(os.path.join(OUT, sub), ignore_errors=True)
    model.save_pretrained(os.path.join(OUT, "hf"), safe_serialization=True)
    # ~312 KB of float32 weights: 120 KB shards give three files and an index.
    model.save_pretrained(os.path.join(OUT, "hf-sharded"), safe_serialization=True,
                          max_shard_size="120KB")
    logits = hf_logits(model, tokens)
    for sub in ("hf", "hf-sharded"):
        write_golden(os.path.join(OUT, sub, "logits.bin"),
                     [("tokens", np.array(tokens, dtype=np.float32)), ("logits", logits)])

    tied = hf_model(tie=True, seed=2)
    with torch.no_grad():
        for p in tied.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    # Save a bf16 copy, but take the logits from the float32 model holding the same (rounded)
    # values: .to(bfloat16) would also round the rotary inv_freq buffer, which the checkpoint
    # does not hold and no loader would reproduce.
    copy.deepcopy(tied).to(torch.bfloat16).save_pretrained(os.path.join(OUT, "hf-bf16"),
                                                           safe_serialization=True)
    logits = hf_logits(tied, tokens)  # float64 on the bf16-rounded weights
    write_golden(os.path.join(OUT, "hf-bf16", "logits.bin"),
                 [("tokens", np.array(tokens, dtype=np.float32)), ("logits", logits)])
    for sub in ("hf", "hf-sharded", "hf-bf16"):
        gen = os.path.join(OUT, sub, "generation_config.json")
        if os.path.exists(gen):
            os.remove(gen)


# ---------------------------------------------------------------------------------------------
# llama2.c


class L2cParams:
    dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len = 32, 64, 2, 4, 2, 96, 32


def l2c_weights(p, seed, shared):
    rng = np.random.default_rng(seed)
    hd = p.dim // p.n_heads
    kv = p.n_kv_heads * hd

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm():
        return (1.0 + 0.1 * rng.standard_normal(p.dim)).astype(np.float32)

    w = {"emb": rng.standard_normal((p.vocab_size, p.dim)).astype(np.float32)}
    w["att_norm"] = [norm() for _ in range(p.n_layers)]
    w["wq"] = [mat(p.dim, p.dim) for _ in range(p.n_layers)]
    w["wk"] = [mat(kv, p.dim) for _ in range(p.n_layers)]
    w["wv"] = [mat(kv, p.dim) for _ in range(p.n_layers)]
    w["wo"] = [mat(p.dim, p.dim) for _ in range(p.n_layers)]
    w["ffn_norm"] = [norm() for _ in range(p.n_layers)]
    w["w1"] = [mat(p.hidden_dim, p.dim) for _ in range(p.n_layers)]  # gate
    w["w2"] = [mat(p.dim, p.hidden_dim) for _ in range(p.n_layers)]  # down
    w["w3"] = [mat(p.hidden_dim, p.dim) for _ in range(p.n_layers)]  # up
    w["norm"] = norm()
    w["cls"] = w["emb"] if shared else mat(p.vocab_size, p.dim)
    return w


def l2c_freqs(p):
    # model.py's precompute_freqs_cis: [seq_len][head_dim/2] cos and sin.
    hd = p.dim // p.n_heads
    freqs = 1.0 / (10000.0 ** (np.arange(0, hd, 2)[: hd // 2].astype(np.float32) / hd))
    angles = np.outer(np.arange(p.seq_len, dtype=np.float32), freqs)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def write_legacy(path, p, w):
    # export.py legacy_export: header, then all tensors grouped by kind across layers.
    shared = w["cls"] is w["emb"]
    with open(path, "wb") as f:
        f.write(struct.pack("iiiiiii", p.dim, p.hidden_dim, p.n_layers, p.n_heads, p.n_kv_heads,
                            p.vocab_size if shared else -p.vocab_size, p.seq_len))
        f.write(w["emb"].tobytes())
        for key in ("att_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3"):
            for t in w[key]:
                f.write(t.tobytes())
        f.write(w["norm"].tobytes())
        cos, sin = l2c_freqs(p)
        f.write(cos.tobytes())
        f.write(sin.tobytes())
        if not shared:
            f.write(w["cls"].tobytes())


def write_v1(path, p, w):
    # export.py version1_export: 256-byte header, norms first, then the matrices.
    shared = w["cls"] is w["emb"]
    with open(path, "wb") as f:
        f.write(struct.pack("I", 0x616B3432))
        f.write(struct.pack("i", 1))
        f.write(struct.pack("iiiiiii", p.dim, p.hidden_dim, p.n_layers, p.n_heads, p.n_kv_heads,
                            p.vocab_size, p.seq_len))
        f.write(struct.pack("B", int(shared)))
        f.write(b"\0" * (256 - f.tell()))
        tensors = [*w["att_norm"], *w["ffn_norm"], w["norm"], w["emb"], *w["wq"], *w["wk"],
                   *w["wv"], *w["wo"], *w["w1"], *w["w2"], *w["w3"]]
        if not shared:
            tensors.append(w["cls"])
        for t in tensors:
            f.write(t.tobytes())


def l2c_forward(p, w, tokens):
    """run.c's forward in float64: RMSNorm eps 1e-5, RoPE on (2i, 2i+1) pairs with theta 10000,
    GQA (query head h reads kv head h // (n_heads/n_kv_heads)), SwiGLU w2(silu(w1 x) * w3 x)."""
    f = lambda a: np.asarray(a, dtype=np.float64)
    hd = p.dim // p.n_heads
    group = p.n_heads // p.n_kv_heads
    T = len(tokens)

    def rms(x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5) * f(g)

    def rope(x, n_heads):  # x: [T][n_heads*hd]
        x = x.reshape(T, n_heads, hd // 2, 2).copy()
        inv = 1.0 / 10000.0 ** (np.arange(0, hd, 2) / hd)
        ang = np.arange(T)[:, None] * inv[None, :]  # [T][hd/2]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., 0].copy(), x[..., 1].copy()
        x[..., 0] = a * c - b * s
        x[..., 1] = a * s + b * c
        return x.reshape(T, n_heads * hd)

    x = f(w["emb"])[tokens]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(p.n_layers):
        h = rms(x, w["att_norm"][l])
        q = rope(h @ f(w["wq"][l]).T, p.n_heads).reshape(T, p.n_heads, hd)
        k = rope(h @ f(w["wk"][l]).T, p.n_kv_heads).reshape(T, p.n_kv_heads, hd)
        v = (h @ f(w["wv"][l]).T).reshape(T, p.n_kv_heads, hd)
        out = np.zeros((T, p.n_heads, hd))
        for head in range(p.n_heads):
            kvh = head // group
            scores = q[:, head] @ k[:, kvh].T / np.sqrt(hd) + mask
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
            out[:, head] = scores @ v[:, kvh]
        x = x + out.reshape(T, p.dim) @ f(w["wo"][l]).T
        h = rms(x, w["ffn_norm"][l])
        gate = h @ f(w["w1"][l]).T
        up = h @ f(w["w3"][l]).T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ f(w["w2"][l]).T
    return rms(x, w["norm"]) @ f(w["cls"]).T


def write_llama2c(tokens):
    p = L2cParams()
    for name, version, shared, seed in (("llama2c-v0", 0, False, 3), ("llama2c-v1", 1, True, 4)):
        w = l2c_weights(p, seed, shared)
        (write_legacy if version == 0 else write_v1)(os.path.join(OUT, name + ".bin"), p, w)
        write_golden(os.path.join(OUT, name + ".logits.bin"),
                     [("tokens", np.array(tokens, dtype=np.float32)),
                      ("logits", l2c_forward(p, w, tokens))])


def write_tokenizer():
    # llama2.c's tokenizer.py export: pieces with '▁' written as ' ', BOS/EOS as "\n<s>\n" and
    # "\n</s>\n", u32 max_token_length, then per token f32 score, u32 length, bytes.
    pieces = [("<unk>", 0.0), ("\n<s>\n", 0.0), ("\n</s>\n", 0.0)]
    pieces += [("<0x%02X>" % b, 0.0) for b in range(256)]
    pieces += [("▁h", -1.0), ("ll", -2.0), ("▁he", -3.0), ("llo", -4.0), ("▁hello", -5.0),
               ("▁w", -6.0), ("or", -7.0), ("ld", -8.0), ("▁wor", -9.0), ("▁world", -10.0)]
    pieces += [(c, -20.0 - i) for i, c in enumerate(["▁", "h", "e", "l", "o", "w", "r", "d"])]
    encoded = [(t.replace("▁", " ").encode("utf-8"), s) for t, s in pieces]
    with open(os.path.join(OUT, "tokenizer.bin"), "wb") as f:
        f.write(struct.pack("I", max(len(b) for b, _ in encoded)))
        for b, s in encoded:
            f.write(struct.pack("fI", s, len(b)))
            f.write(b)


def main():
    os.makedirs(OUT, exist_ok=True)
    tokens = [int(t) for t in np.random.default_rng(0).integers(0, 96, N_TOKENS)]
    write_hf(tokens)
    write_llama2c(tokens)
    write_tokenizer()
    total = 0
    for dirpath, _, files in os.walk(OUT):
        for name in files:
            total += os.path.getsize(os.path.join(dirpath, name))
    print(f"wrote {OUT}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
