#!/usr/bin/env python3
"""Goldens for the model families beyond Llama: tiny random checkpoints and their logits.

    tools/setup_python.sh && .venv-tools/bin/python tools/gen_family_goldens.py

For each family this writes tests/goldens/families/<family>/ holding
  config.json, model.safetensors   a Hugging Face checkpoint (float32), as
                                   save_pretrained writes it;
  logits.bin                       HLLMGLD1 (format in gen_goldens.py): "tokens" [T] and the
                                   float64 reference "logits" [T, vocab], rounded to float32.
tests/test_families.cpp loads each checkpoint directly and after conversion to GGUF and
compares every ISA's logits, prefill and decode, with these.

Independent references
----------------------
* A textbook float64 decoder written here (decoder_logits) from the reference modeling code of
  each family, with the variant switches the family needs:
    - qwen2: transformers' models/qwen2/modeling_qwen2.py (4.46.3): Llama with biases on
      q_proj/k_proj/v_proj (nn.Linear(..., bias=True)), none on o_proj;
    - qwen3: transformers' models/qwen3/modeling_qwen3.py (added in 4.51, after the pinned
      version): Qwen3Attention applies Qwen3RMSNorm(head_dim) to q and k of each head
      (`self.q_norm(self.q_proj(x).view(hidden_shape))`) before apply_rotary_pos_emb; no
      biases (attention_bias=False); head_dim is a config key, independent of hidden_size.
* Where the pinned transformers has the class (Qwen2ForCausalLM), its eager float64 forward,
  with the float32 casts inside kept in float64 as gen_goldens.py does for Llama, must agree
  with the textbook logits within 1e-9; the checkpoint is written by its save_pretrained.
  Where it lacks the class (Qwen3), config.json is written with the keys Qwen3Config has and
  the tensors with the names Qwen3ForCausalLM uses.
Deterministic: fixed seeds; a re-run writes identical files.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_goldens as g  # noqa: E402  (helpers: Rng, rmsnorm, apply_rope, attention, ...)

from safetensors.torch import save_file  # noqa: E402
from transformers import Qwen2Config, Qwen2ForCausalLM  # noqa: E402
from transformers.models.qwen2 import modeling_qwen2  # noqa: E402

F64 = torch.float64
OUT_DIR = g.ROOT / "tests" / "goldens" / "families"
TOKENS = 40


def random_checkpoint(rng: g.Rng, cfg: dict) -> dict:
    """HF-named float32-exact float64 tensors for a decoder of this shape and variants."""
    dim, hd = cfg["hidden_size"], cfg["head_dim"]
    q, kv, ffn = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd, cfg["intermediate_size"]
    w = {"model.embed_tokens.weight": rng.normal(cfg["vocab_size"], dim)}  # [vocab, dim]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = rng.norm_weight(dim)  # [dim]
        for name, rows in (("q", q), ("k", kv), ("v", kv)):
            w[p + f"self_attn.{name}_proj.weight"] = rng.linear(rows, dim)  # [rows, dim]
            if cfg["qkv_bias"]:
                w[p + f"self_attn.{name}_proj.bias"] = rng.normal(rows, std=0.1)  # [rows]
        if cfg["qk_norm"]:
            w[p + "self_attn.q_norm.weight"] = rng.norm_weight(hd)  # [hd]
            w[p + "self_attn.k_norm.weight"] = rng.norm_weight(hd)  # [hd]
        w[p + "self_attn.o_proj.weight"] = rng.linear(dim, q)  # [dim, q]
        w[p + "post_attention_layernorm.weight"] = rng.norm_weight(dim)  # [dim]
        w[p + "mlp.gate_proj.weight"] = rng.linear(ffn, dim)  # [ffn, dim]
        w[p + "mlp.up_proj.weight"] = rng.linear(ffn, dim)  # [ffn, dim]
        w[p + "mlp.down_proj.weight"] = rng.linear(dim, ffn)  # [dim, ffn]
    w["model.norm.weight"] = rng.norm_weight(dim)  # [dim]
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = rng.normal(cfg["vocab_size"], dim, std=1.0 / math.sqrt(dim))  # [vocab, dim]
    return w


def decoder_logits(w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """Textbook float64 forward of a pre-norm decoder with the family's variants. -> [T, vocab]."""
    T, eps, hd = tokens.numel(), cfg["rms_norm_eps"], cfg["head_dim"]
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    inv_freq = g.inv_freq_base(cfg["rope_theta"], hd)  # [hd/2]
    pos = torch.arange(T)  # [T]
    h = w["model.embed_tokens.weight"][tokens]  # [T, dim]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        n = g.rmsnorm(h, w[p + "input_layernorm.weight"], eps)  # [T, dim]

        def project(name: str, heads: int) -> torch.Tensor:
            y = n @ w[p + f"self_attn.{name}_proj.weight"].T  # [T, heads*hd]
            if cfg["qkv_bias"]:
                y = y + w[p + f"self_attn.{name}_proj.bias"]
            return y.reshape(T, heads, hd)  # [T, heads, hd]

        q, k, v = project("q", H), project("k", KVH), project("v", KVH)
        if cfg["qk_norm"]:  # per head, over head_dim
            q = g.rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps)  # [T, H, hd]
            k = g.rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps)  # [T, KVH, hd]
        q = g.apply_rope(q, pos, inv_freq, "neox")  # HF rotate_half: [T, H, hd]
        k = g.apply_rope(k, pos, inv_freq, "neox")  # [T, KVH, hd]
        a = g.attention(q, k, v).reshape(T, H * hd)  # [T, H*hd]
        h = h + a @ w[p + "self_attn.o_proj.weight"].T  # [T, dim]
        m = g.rmsnorm(h, w[p + "post_attention_layernorm.weight"], eps)  # [T, dim]
        h = h + g.swiglu(m, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                         w[p + "mlp.down_proj.weight"])  # [T, dim]
    out = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return g.rmsnorm(h, w["model.norm.weight"], eps) @ out.T  # [T, vocab]


def base_config(**kw) -> dict:
    cfg = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
               rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, qkv_bias=False,
               qk_norm=False)
    cfg.update(kw)
    return cfg


def hf_qwen2_logits(out: Path, w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """Qwen2ForCausalLM (eager, float64 inside) on these weights; saves the checkpoint to out."""
    hf_cfg = Qwen2Config(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                         intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
                         num_attention_heads=cfg["num_attention_heads"],
                         num_key_value_heads=cfg["num_key_value_heads"], hidden_act="silu",
                         max_position_embeddings=cfg["max_position_embeddings"], rms_norm_eps=cfg["rms_norm_eps"],
                         rope_theta=cfg["rope_theta"], tie_word_embeddings=cfg["tie_word_embeddings"],
                         use_sliding_window=False, attn_implementation="eager", torch_dtype="float32")
    assert hf_cfg.hidden_size // hf_cfg.num_attention_heads == cfg["head_dim"]
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(hf_cfg).eval()
    params = dict(model.named_parameters())
    assert set(params) == set(w), f"parameter set mismatch: {set(params) ^ set(w)}"
    with torch.no_grad():
        for name, value in w.items():
            params[name].copy_(value.to(torch.float32))
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    model = model.double()
    model.model.rotary_emb = g.Float64Rotary(g.inv_freq_base(cfg["rope_theta"], cfg["head_dim"]))
    saved = modeling_qwen2.torch
    modeling_qwen2.torch = g._TorchWithFloat64As32()  # RMSNorm / softmax casts stay float64
    try:
        with torch.no_grad():
            logits = model(tokens[None]).logits[0]  # [T, vocab]
    finally:
        modeling_qwen2.torch = saved
    assert logits.dtype == F64
    return logits


def write_qwen3_checkpoint(out: Path, w: dict, cfg: dict) -> None:
    """config.json with Qwen3Config's keys and model.safetensors with Qwen3ForCausalLM's names."""
    out.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
              "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
              "hidden_size": cfg["hidden_size"], "head_dim": cfg["head_dim"], "initializer_range": 0.02,
              "intermediate_size": cfg["intermediate_size"],
              "max_position_embeddings": cfg["max_position_embeddings"], "max_window_layers": cfg["num_hidden_layers"],
              "num_attention_heads": cfg["num_attention_heads"], "num_hidden_layers": cfg["num_hidden_layers"],
              "num_key_value_heads": cfg["num_key_value_heads"], "rms_norm_eps": cfg["rms_norm_eps"],
              "rope_scaling": None, "rope_theta": cfg["rope_theta"], "sliding_window": None,
              "tie_word_embeddings": cfg["tie_word_embeddings"], "torch_dtype": "float32",
              "use_cache": True, "use_sliding_window": False, "vocab_size": cfg["vocab_size"]}
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file({k: v.to(torch.float32).contiguous() for k, v in w.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})


def gen_family(name: str, seed: int, cfg: dict) -> None:
    out = OUT_DIR / name
    rng = g.Rng(seed)
    tokens = rng.ints(0, cfg["vocab_size"], TOKENS)  # [T]
    w = random_checkpoint(rng, cfg)
    ref = decoder_logits(w, cfg, tokens)  # [T, vocab]
    note = "textbook float64 only (class not in the pinned transformers)"
    if name == "qwen2":
        hf = hf_qwen2_logits(out, w, cfg, tokens)
        err = g.assert_close(f"{name} textbook vs HF Qwen2ForCausalLM", ref, hf, g.TOL_F64)
        note = f"HF Qwen2ForCausalLM float64 max diff {err:.1e}"
    elif name == "qwen3":
        write_qwen3_checkpoint(out, w, cfg)
    g.emit(out, "logits.bin", {"tokens": tokens, "logits": ref},
           f"|logits| max {float(ref.abs().max()):.2f}; {note}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.parse_args(argv)
    # Qwen2: q/k/v biases, tied embeddings (as Qwen2.5-0.5B).
    gen_family("qwen2", 11, base_config(qkv_bias=True, tie_word_embeddings=True))
    # Qwen3: QK-norm, head_dim (32) unrelated to hidden_size / heads (16), as Qwen3-0.6B.
    gen_family("qwen3", 12, base_config(qk_norm=True, head_dim=32))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
