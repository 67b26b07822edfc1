#!/usr/bin/env python3
"""Goldens for the model families beyond Llama: tiny random checkpoints and their logits.

    tools/setup_python.sh && .venv-tools/bin/python tools/gen_family_goldens.py [FAMILY...]

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
      biases (attention_bias=False); head_dim is a config key, independent of hidden_size;
    - phi3: transformers' models/phi3/modeling_phi3.py (4.46.3): Llama's arithmetic with q|k|v
      in one qkv_proj and gate|up in one gate_up_proj (`gate, up = y.chunk(2, dim=-1)`), and a
      sliding window (wider than the prompt here);
    - qwen3moe: transformers' models/qwen3_moe/modeling_qwen3_moe.py (added in 4.51): Qwen3's
      attention, and Qwen3MoeSparseMoeBlock's softmax router, top-k, `if self.norm_topk_prob:
      routing_weights /= routing_weights.sum(...)`, experts of moe_intermediate_size;
    - olmoe: models/olmoe/modeling_olmoe.py (4.46.3): `self.q_norm(self.q_proj(x))`, an
      OlmoeRMSNorm over the whole projection (hidden_size for q, kv heads * head_dim for k)
      before the head split; Mixtral-style experts, not renormalized (norm_topk_prob False);
    - olmo2: models/olmo2/modeling_olmo2.py (added in 4.47): OLMoE's QK-norm, and
      Olmo2DecoderLayer's `h = x + post_attention_layernorm(self_attn(x))`,
      `out = h + post_feedforward_layernorm(mlp(h))`, no norm on the sublayers' inputs;
    - command-r: transformers' models/cohere/modeling_cohere.py (4.46.3): CohereDecoderLayer's
      parallel block, `residual + self_attn(n) + mlp(n)` with n = input_layernorm(x), a
      CohereLayerNorm (mean-centred, weight only, layer_norm_eps); rotate_half on the pairs
      (2i, 2i + 1) (`x[..., ::2]`, `x[..., 1::2]`, cos/sin repeat_interleave'd); tied
      embeddings; `logits * self.logit_scale`;
    - command-r-plus: the same file with use_qk_norm (Command R+): CohereAttention's
      `self.q_norm = CohereLayerNorm(hidden_size=(self.num_heads, self.head_dim), ...)`, applied
      to q and k viewed as [.., heads, head_dim] before apply_rotary_pos_emb: each head normed
      over head_dim with its own weight row;
    - falcon: transformers' models/falcon/modeling_falcon.py (4.46.3), Falcon-7B's form
      (multi_query, parallel_attn, new_decoder_architecture False, bias False):
      FalconDecoderLayer's `mlp_output += attention_output; output = mlp_output + residual`,
      both sublayers reading input_layernorm, an nn.LayerNorm with weight and bias; one KV head;
      q|k|v fused in query_key_value ([q heads | k | v] rows, `_split_heads`); FalconMLP's
      dense_4h_to_h(GELU()(dense_h_to_4h(x))), PyTorch's exact (erf) GELU; half-split RoPE.
    - falcon-40b: the same file in Falcon-40B's form (new_decoder_architecture,
      num_ln_in_parallel_attn 2): FalconDecoderLayer's `attention_layernorm_out =
      self.ln_attn(hidden_states)`, `mlp_layernorm_out = self.ln_mlp(hidden_states)`, both of
      the block's input; query_key_value grouped per KV head as FalconAttention._split_heads
      views it (`fused_qkv.view(batch, seq_len, -1, self.num_heads // self.num_kv_heads + 2,
      self.head_dim)`: the group's query heads, then its key and its value).
    - gemma3: transformers' models/gemma3/modeling_gemma3.py (added in 4.50): Gemma 2's
      Gemma3DecoderLayer (sandwich norms, Gemma3RMSNorm's `x * (1.0 + self.weight.float())`),
      Gemma3Attention's `self.q_norm(query_states)` / `self.k_norm(key_states)` (per head,
      head_dim) before apply_rotary_pos_emb, `self.is_sliding = bool((layer_idx + 1) %
      config.sliding_window_pattern)`, and Gemma3TextModel's two rotary tables: rotary_emb
      (rope_theta, rope_scaling) for global layers, rotary_emb_local (rope_local_base_freq, no
      scaling) for windowed ones; scaling = query_pre_attn_scalar ** -0.5;
      Gemma3TextScaledWordEmbedding's `* self.embed_scale` (sqrt(hidden_size));
    - gemma3-mm: gemma3's model saved as a Gemma3ForConditionalGeneration checkpoint
      (gemma3_multimodal): the nested text_config, the "language_model." prefix, vision
      tensors beside it; the same logits;
    - deepseek2: DeepSeek-V2's modeling_deepseek.py (remote code; transformers added
      DeepseekV2 after the pinned version): DeepseekV2Attention's q_proj, kv_a_proj_with_mqa
      split into the latent and k_pe, kv_b_proj(kv_a_layernorm(latent)) split per head into
      k_nope and the values, apply_rotary_pos_emb's pairs (2i, 2i + 1), softmax_scale =
      q_head_dim ** -0.5 · yarn_get_mscale(factor, mscale_all_dim)², cos and sin times
      yarn_get_mscale(mscale) / yarn_get_mscale(mscale_all_dim); DeepseekV2MoE's softmax
      gate, greedy top-k, `topk_weight * self.routed_scaling_factor` (norm_topk_prob false),
      shared_experts added ungated; DeepseekV2MLP below first_k_dense_replace;
    - deepseek3: DeepSeek-V3's modeling_deepseek.py (remote code; transformers added
      DeepseekV3 after the pinned version): DeepSeek-V2's attention with q_lora_rank
      (q_b_proj(q_a_layernorm(q_a_proj(x)))), and MoEGate's noaux_tc routing (route_v3):
      sigmoid scores, e_score_correction_bias for choosing only, groups scored by their two
      best, topk_group kept; norm_topk_prob and routed_scaling_factor on the weights; the
      multi-token prediction layer past num_hidden_layers unread;
* Where the pinned transformers has the class (Qwen2, Phi3, Gemma2, Mixtral, Qwen2Moe, Olmoe, Cohere,
  Falcon), its eager
  float64 forward,
  with the float32 casts inside kept in float64 as gen_goldens.py does for Llama, must agree
  with the textbook logits within 1e-9; the checkpoint is written by its save_pretrained.
  Where it lacks the class (Qwen3, Qwen3Moe, Olmo2, Gemma3, DeepseekV2, DeepseekV3), config.json is written with the keys its
  config class has and the tensors with the names its model uses.
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
from transformers import (CohereConfig, CohereForCausalLM, FalconConfig, FalconForCausalLM,  # noqa: E402
                          Gemma2Config, Gemma2ForCausalLM, MixtralConfig, MixtralForCausalLM,
                          OlmoeConfig, OlmoeForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM)
from transformers.models.cohere import modeling_cohere  # noqa: E402
from transformers.models.falcon import modeling_falcon  # noqa: E402
from transformers.models.gemma2 import modeling_gemma2  # noqa: E402
from transformers.models.mixtral import modeling_mixtral  # noqa: E402
from transformers.models.olmoe import modeling_olmoe  # noqa: E402
from transformers.models.qwen2_moe import modeling_qwen2_moe  # noqa: E402
from transformers.models.phi3 import modeling_phi3  # noqa: E402
from transformers.models.qwen2 import modeling_qwen2  # noqa: E402

F64 = torch.float64
OUT_DIR = g.ROOT / "tests" / "goldens" / "families"
TOKENS = 40


def random_checkpoint(rng: g.Rng, cfg: dict) -> dict:
    """HF-named float32-exact float64 tensors for a decoder of this shape and variants."""
    dim, hd = cfg["hidden_size"], cfg["head_dim"]
    q, kv, ffn = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd, cfg["intermediate_size"]
    layout = cfg["layout"]
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    qk_norm_rows = {"head": ((hd,), (hd,)), "whole": ((q,), (kv,)),
                    "each_head": ((H, hd), (KVH, hd))}.get(cfg["qk_norm"])

    def norm_weight(n) -> torch.Tensor:
        # Gemma's checkpoints hold w for a norm that scales by 1 + w; 1 + w stays float32-exact.
        if isinstance(n, tuple):  # one weight row per head (Command R+'s QK-norm): [heads, hd]
            return torch.stack([norm_weight(n[1]) for _ in range(n[0])])
        return rng.norm_weight(n) - cfg["norm_offset"]  # [n]

    w = {"model.embed_tokens.weight": rng.normal(cfg["vocab_size"], dim)}  # [vocab, dim]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        if layout != "post":  # post-norm (OLMo 2): no norm on the sublayers' inputs
            w[p + "input_layernorm.weight"] = norm_weight(dim)  # [dim]
            if cfg["norm_bias"]:  # Falcon's LayerNorm
                w[p + "input_layernorm.bias"] = rng.normal(dim, std=0.1)  # [dim]
        for name, rows in (("q", q), ("k", kv), ("v", kv)):
            w[p + f"self_attn.{name}_proj.weight"] = rng.linear(rows, dim)  # [rows, dim]
            if cfg["qkv_bias"]:
                w[p + f"self_attn.{name}_proj.bias"] = rng.normal(rows, std=0.1)  # [rows]
        if qk_norm_rows:  # per head (Qwen3): [hd] each; whole projection (OLMoE): [q], [kv];
            # each head its own (Command R+): [H, hd], [KVH, hd]
            shape_q, shape_k = qk_norm_rows
            w[p + "self_attn.q_norm.weight"] = norm_weight(shape_q if len(shape_q) > 1 else shape_q[0])
            w[p + "self_attn.k_norm.weight"] = norm_weight(shape_k if len(shape_k) > 1 else shape_k[0])
        w[p + "self_attn.o_proj.weight"] = rng.linear(dim, q)  # [dim, q]
        # Sandwich norms (Gemma 2): post_attention_layernorm follows attention and
        # pre_feedforward_layernorm precedes the FFN; with post-norm (OLMo 2) the FFN has no
        # input norm; with pre-norm post_attention_layernorm is the FFN's norm; a parallel
        # block (Command-R) has only input_layernorm, unless its FFN reads a norm of its own
        # (Falcon-40B's ln_mlp, named post_attention_layernorm here).
        if layout != "parallel" or cfg["parallel_ffn_norm"]:
            w[p + "post_attention_layernorm.weight"] = norm_weight(dim)  # [dim]
            if cfg["norm_bias"]:
                w[p + "post_attention_layernorm.bias"] = rng.normal(dim, std=0.1)  # [dim]
        if layout == "sandwich":
            w[p + "pre_feedforward_layernorm.weight"] = norm_weight(dim)  # [dim]
        if cfg["n_experts"]:
            w.update(random_experts(rng, cfg, p))
        else:
            if cfg["gated"]:  # else a plain MLP (Falcon)
                w[p + "mlp.gate_proj.weight"] = rng.linear(ffn, dim)  # [ffn, dim]
            w[p + "mlp.up_proj.weight"] = rng.linear(ffn, dim)  # [ffn, dim]
            w[p + "mlp.down_proj.weight"] = rng.linear(dim, ffn)  # [dim, ffn]
        if layout in ("sandwich", "post"):
            w[p + "post_feedforward_layernorm.weight"] = norm_weight(dim)  # [dim]
    w["model.norm.weight"] = norm_weight(dim)  # [dim]
    if cfg["norm_bias"]:
        w["model.norm.bias"] = rng.normal(dim, std=0.1)  # [dim]
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = rng.normal(cfg["vocab_size"], dim, std=1.0 / math.sqrt(dim))  # [vocab, dim]
    return w


def expert_names(cfg: dict, p: str, e: int) -> tuple[str, str, str]:
    """HF names of expert e's gate, up and down in layer prefix p (Mixtral's or Qwen's)."""
    if cfg["mixtral_names"]:
        q = p + f"block_sparse_moe.experts.{e}."
        return q + "w1.weight", q + "w3.weight", q + "w2.weight"
    q = p + f"mlp.experts.{e}."
    return q + "gate_proj.weight", q + "up_proj.weight", q + "down_proj.weight"


def router_name(cfg: dict, p: str) -> str:
    return p + ("block_sparse_moe.gate.weight" if cfg["mixtral_names"] else "mlp.gate.weight")


def random_experts(rng: g.Rng, cfg: dict, p: str) -> dict:
    """Router, experts and shared expert of one MoE layer, HF-named."""
    dim, eff, sff = cfg["hidden_size"], cfg["expert_ffn"], cfg["shared_ffn"]
    w = {router_name(cfg, p): rng.linear(cfg["n_experts"], dim)}  # [E, dim]
    for e in range(cfg["n_experts"]):
        gate, up, down = expert_names(cfg, p, e)
        w[gate] = rng.linear(eff, dim)  # [eff, dim]
        w[up] = rng.linear(eff, dim)  # [eff, dim]
        w[down] = rng.linear(dim, eff)  # [dim, eff]
    if sff:
        q = p + "mlp.shared_expert."
        w[q + "gate_proj.weight"] = rng.linear(sff, dim)  # [sff, dim]
        w[q + "up_proj.weight"] = rng.linear(sff, dim)  # [sff, dim]
        w[q + "down_proj.weight"] = rng.linear(dim, sff)  # [dim, sff]
        w[p + "mlp.shared_expert_gate.weight"] = rng.linear(1, dim)  # [1, dim]
    return w


def moe(w: dict, cfg: dict, p: str, m: torch.Tensor) -> torch.Tensor:
    """Mixture-of-experts FFN of layer prefix p: softmax router, top-k (ties to the lower index),
    weights renormalized where the family says, plus the sigmoid-gated shared expert. m: [T, dim]."""
    probs = torch.softmax(m @ w[router_name(cfg, p)].T, dim=-1)  # [T, E]
    out = torch.zeros_like(m)  # [T, dim]
    for t in range(m.shape[0]):
        order = sorted(range(cfg["n_experts"]), key=lambda e: (-float(probs[t, e]), e))
        chosen = order[:cfg["n_experts_used"]]
        weights = probs[t, chosen]  # [k]
        if cfg["norm_topk"]:
            weights = weights / weights.sum()
        for e, weight in zip(chosen, weights):
            gate, up, down = expert_names(cfg, p, e)
            out[t] += weight * g.swiglu(m[t:t + 1], w[gate], w[up], w[down])[0]
    if cfg["shared_ffn"]:
        q = p + "mlp.shared_expert."
        shared = g.swiglu(m, w[q + "gate_proj.weight"], w[q + "up_proj.weight"], w[q + "down_proj.weight"])
        out = out + torch.sigmoid(m @ w[p + "mlp.shared_expert_gate.weight"].T) * shared  # [T, dim]
    return out


def decoder_logits(w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """Textbook float64 forward of a pre-norm decoder with the family's variants. -> [T, vocab]."""
    T, eps, hd = tokens.numel(), cfg["rms_norm_eps"], cfg["head_dim"]
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    # The global layers' RoPE (linear scaling where the config has it: Gemma 3's 4B and up) and
    # the windowed layers' own, unscaled base where the family has one (Gemma 3's
    # rope_local_base_freq: Gemma3TextModel's rotary_emb_local).
    inv_freq = g.inv_freq_linear(cfg["rope_theta"], hd, cfg["rope_linear_factor"])  # [hd/2]
    local_theta = cfg["rope_local_theta"] or cfg["rope_theta"]
    inv_freq_local = g.inv_freq_base(local_theta, hd) if cfg["rope_local_theta"] else inv_freq
    pos = torch.arange(T)  # [T]
    scale = cfg["query_pre_attn_scalar"] ** -0.5 if cfg["query_pre_attn_scalar"] else None
    pattern, window = cfg["sliding_pattern"], cfg["sliding_window"]

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:
        if cfg["norm"] == "layer":  # mean-centred, biased variance; a bias in Falcon's
            c = x - x.mean(-1, keepdim=True)
            y = c * torch.rsqrt(c.pow(2).mean(-1, keepdim=True) + eps) * w[name]
            return y + w[name[:-len("weight")] + "bias"] if cfg["norm_bias"] else y
        return g.rmsnorm(x, w[name] + cfg["norm_offset"], eps)

    def softcap(x: torch.Tensor, cap: float) -> torch.Tensor:
        return cap * torch.tanh(x / cap) if cap > 0 else x

    h = w["model.embed_tokens.weight"][tokens]  # [T, dim]
    if cfg["embed_scale"]:  # Gemma: the embedding times sqrt(hidden_size)
        h = h * math.sqrt(cfg["hidden_size"])
    layout = cfg["layout"]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        n = h if layout == "post" else norm(h, p + "input_layernorm.weight")  # [T, dim]
        if cfg["parallel_ffn_norm"]:  # Falcon-40B: the FFN's own norm of the block's input
            n_ffn = norm(h, p + "post_attention_layernorm.weight")  # [T, dim]

        def project(name: str, heads: int) -> torch.Tensor:
            y = n @ w[p + f"self_attn.{name}_proj.weight"].T  # [T, heads*hd]
            if cfg["qkv_bias"]:
                y = y + w[p + f"self_attn.{name}_proj.bias"]
            if cfg["qk_norm"] == "whole":  # OLMoE, OLMo 2: over the whole projection
                y = norm(y, p + f"self_attn.{name}_norm.weight") if name != "v" else y
            y = y.reshape(T, heads, hd)  # [T, heads, hd]
            if cfg["qk_norm"] in ("head", "each_head") and name != "v":  # per head, over head_dim
                y = norm(y, p + f"self_attn.{name}_norm.weight")  # Command R+: [heads, hd] weights
            return y

        # Layer l is windowed when pattern is 0 (all layers) or l % pattern < pattern - 1
        # (Gemma 2: pattern 2, the even layers; Gemma 3: 6).
        windowed = pattern == 0 or l % pattern < pattern - 1
        rope_freq = inv_freq_local if windowed and window else inv_freq  # [hd/2]
        q, k, v = project("q", H), project("k", KVH), project("v", KVH)
        q = g.apply_rope(q, pos, rope_freq, cfg["rope"])  # HF rotate_half: [T, H, hd]
        k = g.apply_rope(k, pos, rope_freq, cfg["rope"])  # [T, KVH, hd]
        a = g.attention(q, k, v, window if windowed else 0, scale=scale,
                        softcap=cfg["attn_softcap"]).reshape(T, H * hd)  # [T, H*hd]
        a = a @ w[p + "self_attn.o_proj.weight"].T  # [T, dim]
        if layout == "sandwich":
            h = h + norm(a, p + "post_attention_layernorm.weight")
            m = norm(h, p + "pre_feedforward_layernorm.weight")  # [T, dim]
        elif layout == "post":
            h = h + norm(a, p + "post_attention_layernorm.weight")
            m = h  # [T, dim]
        elif layout == "parallel":  # the FFN reads the attention's input norm, or its own
            h = h + a
            m = n_ffn if cfg["parallel_ffn_norm"] else n  # [T, dim]
        else:
            h = h + a
            m = norm(h, p + "post_attention_layernorm.weight")  # [T, dim]
        if cfg["n_experts"]:
            f = moe(w, cfg, p, m)  # [T, dim]
        elif not cfg["gated"]:  # plain MLP with the exact GELU (Falcon)
            up = m @ w[p + "mlp.up_proj.weight"].T  # [T, ffn]
            f = (0.5 * up * (1.0 + torch.erf(up / math.sqrt(2.0)))) @ w[p + "mlp.down_proj.weight"].T
        else:
            gate = m @ w[p + "mlp.gate_proj.weight"].T  # [T, ffn]
            up = m @ w[p + "mlp.up_proj.weight"].T  # [T, ffn]
            if cfg["activation"] == "silu":
                act = gate / (1.0 + torch.exp(-gate))  # [T, ffn]
            else:  # GeGLU, GELU's tanh approximation
                act = 0.5 * gate * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (gate + 0.044715 * gate ** 3)))
            f = (act * up) @ w[p + "mlp.down_proj.weight"].T  # [T, dim]
        output_norm = layout in ("sandwich", "post")
        h = h + (norm(f, p + "post_feedforward_layernorm.weight") if output_norm else f)
    out = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    logits = norm(h, "model.norm.weight") @ out.T  # [T, vocab]
    if cfg["logit_scale"]:  # Cohere
        logits = logits * cfg["logit_scale"]
    return softcap(logits, cfg["final_softcap"])  # [T, vocab]


def random_deepseek2_checkpoint(rng: g.Rng, cfg: dict) -> dict:
    """HF-named tensors of a DeepseekV2ForCausalLM: latent attention, leading dense layers, then
    experts with ungated shared experts."""
    dim, H = cfg["hidden_size"], cfg["num_attention_heads"]
    nope, rot, v, lora = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    w = {"model.embed_tokens.weight": rng.normal(cfg["vocab_size"], dim)}  # [vocab, dim]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = rng.norm_weight(dim)  # [dim]
        if cfg.get("q_lora_rank"):  # V3: q = q_b_proj(q_a_layernorm(q_a_proj(x)))
            q_lora = cfg["q_lora_rank"]
            w[p + "self_attn.q_a_proj.weight"] = rng.linear(q_lora, dim)  # [q_lora, dim]
            w[p + "self_attn.q_a_layernorm.weight"] = rng.norm_weight(q_lora)  # [q_lora]
            w[p + "self_attn.q_b_proj.weight"] = rng.linear(H * (nope + rot), q_lora)  # [H*(nope+rot), q_lora]
        else:
            w[p + "self_attn.q_proj.weight"] = rng.linear(H * (nope + rot), dim)  # [H*(nope+rot), dim]
        w[p + "self_attn.kv_a_proj_with_mqa.weight"] = rng.linear(lora + rot, dim)  # [lora+rot, dim]
        w[p + "self_attn.kv_a_layernorm.weight"] = rng.norm_weight(lora)  # [lora]
        w[p + "self_attn.kv_b_proj.weight"] = rng.linear(H * (nope + v), lora)  # [H*(nope+v), lora]
        w[p + "self_attn.o_proj.weight"] = rng.linear(dim, H * v)  # [dim, H*v]
        w[p + "post_attention_layernorm.weight"] = rng.norm_weight(dim)  # [dim]
        if l < cfg["first_k_dense_replace"]:
            ffn = cfg["intermediate_size"]
            w[p + "mlp.gate_proj.weight"] = rng.linear(ffn, dim)  # [ffn, dim]
            w[p + "mlp.up_proj.weight"] = rng.linear(ffn, dim)  # [ffn, dim]
            w[p + "mlp.down_proj.weight"] = rng.linear(dim, ffn)  # [dim, ffn]
            continue
        eff, sff = cfg["moe_intermediate_size"], cfg["moe_intermediate_size"] * cfg["n_shared_experts"]
        w[p + "mlp.gate.weight"] = rng.linear(cfg["n_routed_experts"], dim)  # [E, dim]
        if cfg.get("topk_method") == "noaux_tc":  # V3's selection bias, >= 0 (see deepseek2_logits)
            w[p + "mlp.gate.e_score_correction_bias"] = rng.normal(cfg["n_routed_experts"], std=0.1).abs()  # [E]
        for e in range(cfg["n_routed_experts"]):
            q = p + f"mlp.experts.{e}."
            w[q + "gate_proj.weight"] = rng.linear(eff, dim)  # [eff, dim]
            w[q + "up_proj.weight"] = rng.linear(eff, dim)  # [eff, dim]
            w[q + "down_proj.weight"] = rng.linear(dim, eff)  # [dim, eff]
        q = p + "mlp.shared_experts."
        w[q + "gate_proj.weight"] = rng.linear(sff, dim)  # [sff, dim]
        w[q + "up_proj.weight"] = rng.linear(sff, dim)  # [sff, dim]
        w[q + "down_proj.weight"] = rng.linear(dim, sff)  # [dim, sff]
    # V3's multi-token prediction layers follow the decoder's (model.layers.N for N >=
    # num_hidden_layers); inference reads none of them. A stand-in with some of their tensors.
    for l in range(cfg["num_hidden_layers"], cfg["num_hidden_layers"] + cfg.get("num_nextn_predict_layers", 0)):
        p = f"model.layers.{l}."
        w[p + "eh_proj.weight"] = rng.linear(dim, 2 * dim)  # [dim, 2*dim]
        w[p + "enorm.weight"] = rng.norm_weight(dim)  # [dim]
        w[p + "hnorm.weight"] = rng.norm_weight(dim)  # [dim]
        w[p + "input_layernorm.weight"] = rng.norm_weight(dim)  # [dim]
    w["model.norm.weight"] = rng.norm_weight(dim)  # [dim]
    w["lm_head.weight"] = rng.normal(cfg["vocab_size"], dim, std=1.0 / math.sqrt(dim))  # [vocab, dim]
    return w


MARGIN = 1e-3  # the least gap at a routing decision: float32 rounding must not flip one


def route_v3(scores: torch.Tensor, bias: torch.Tensor, cfg: dict) -> list[int]:
    """DeepSeek-V3's MoEGate, topk_method noaux_tc, for one token: scores [E] (sigmoid), bias
    [E]. `scores_for_choice = scores + e_score_correction_bias`; group_scores = the sum of each
    group's top 2; the topk_group best groups kept, the others' choices `masked_fill(..., 0.0)`;
    topk of what is left. (The mask's 0.0 equals llama.cpp's -inf here: the biases are >= 0, so
    every kept choice is > 0.) -> the chosen experts, best first."""
    E, groups = scores.numel(), cfg["n_group"]
    choice = scores + bias  # [E]
    grouped = choice.view(groups, E // groups)  # [groups, E/groups]
    group_scores = grouped.topk(2, dim=-1)[0].sum(-1)  # [groups]
    order = sorted(range(groups), key=lambda i: (-float(group_scores[i]), i))
    keep = order[:cfg["topk_group"]]
    if len(order) > len(keep):
        assert float(group_scores[keep[-1]] - group_scores[order[len(keep)]]) > MARGIN, "group tie"
    masked = torch.zeros_like(choice)
    for gi in keep:
        masked.view(groups, -1)[gi] = grouped[gi]
    ranked = sorted(range(E), key=lambda e: (-float(masked[e]), e))
    k = cfg["num_experts_per_tok"]
    assert float(masked[ranked[k - 1]] - masked[ranked[k]]) > MARGIN, "expert tie"
    return ranked[:k]


def yarn_get_mscale(scale: float, mscale: float) -> float:
    """modeling_deepseek.py's yarn_get_mscale."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def deepseek2_logits(w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """Textbook float64 forward of DeepseekV2ForCausalLM (DeepSeek-V2's modeling_deepseek.py).
    -> [T, vocab]."""
    T, eps, dim = tokens.numel(), cfg["rms_norm_eps"], cfg["hidden_size"]
    H, nope, rot, v = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    lora, q_head = cfg["kv_lora_rank"], cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    ys = cfg["rope_scaling"]
    # DeepseekV2YarnRotaryEmbedding: YaRN's frequencies (as HF's _compute_yarn_parameters), cos
    # and sin times mscale(mscale) / mscale(mscale_all_dim); DeepseekV2Attention's
    # softmax_scale = q_head ** -0.5 · mscale(mscale_all_dim)².
    inv_freq, _ = g.yarn_params(cfg["rope_theta"], rot, ys["factor"], ys["original_max_position_embeddings"],
                                ys["beta_fast"], ys["beta_slow"])  # [rot/2]
    cos_scale = yarn_get_mscale(ys["factor"], ys["mscale"]) / yarn_get_mscale(ys["factor"], ys["mscale_all_dim"])
    scale = q_head ** -0.5 * yarn_get_mscale(ys["factor"], ys["mscale_all_dim"]) ** 2
    pos = torch.arange(T)  # [T]
    h = w["model.embed_tokens.weight"][tokens]  # [T, dim]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        n = g.rmsnorm(h, w[p + "input_layernorm.weight"], eps)  # [T, dim]
        if cfg.get("q_lora_rank"):  # V3's low-rank queries
            q = g.rmsnorm(n @ w[p + "self_attn.q_a_proj.weight"].T, w[p + "self_attn.q_a_layernorm.weight"], eps) \
                @ w[p + "self_attn.q_b_proj.weight"].T  # [T, H*q_head]
        else:
            q = n @ w[p + "self_attn.q_proj.weight"].T  # [T, H*q_head]
        q = q.reshape(T, H, q_head)  # [T, H, nope+rot]
        q_nope, q_pe = q[..., :nope], q[..., nope:]
        ckv = n @ w[p + "self_attn.kv_a_proj_with_mqa.weight"].T  # [T, lora+rot]
        c, k_pe = ckv[:, :lora], ckv[:, lora:]
        # kv_b_proj(kv_a_layernorm(c)): per head [k_nope | value]
        kv = (g.rmsnorm(c, w[p + "self_attn.kv_a_layernorm.weight"], eps)
              @ w[p + "self_attn.kv_b_proj.weight"].T).reshape(T, H, nope + v)  # [T, H, nope+v]
        k_nope, value = kv[..., :nope], kv[..., nope:]
        # apply_rotary_pos_emb's view(d // 2, 2).transpose: pairs (2i, 2i + 1), interleaved
        q_pe = g.apply_rope(q_pe, pos, inv_freq, "interleaved", cos_scale)  # [T, H, rot]
        k_pe = g.apply_rope(k_pe[:, None, :], pos, inv_freq, "interleaved", cos_scale)  # [T, 1, rot]
        query = torch.cat([q_nope, q_pe], -1)  # [T, H, q_head]
        key = torch.cat([k_nope, k_pe.expand(T, H, rot)], -1)  # [T, H, q_head]
        scores = torch.einsum("thd,shd->hts", query, key) * scale  # [H, T, T]
        scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        a = torch.einsum("hts,shd->thd", torch.softmax(scores, -1), value).reshape(T, H * v)  # [T, H*v]
        h = h + a @ w[p + "self_attn.o_proj.weight"].T
        m = g.rmsnorm(h, w[p + "post_attention_layernorm.weight"], eps)  # [T, dim]
        if l < cfg["first_k_dense_replace"]:
            f = g.swiglu(m, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"], w[p + "mlp.down_proj.weight"])
        else:
            # DeepseekV2MoE: softmax scores, greedy top-k, the weights times routed_scaling_factor
            # (not renormalized: norm_topk_prob false), plus the ungated shared experts.
            # DeepseekV3MoE: sigmoid scores routed by route_v3, the chosen scores renormalized
            # (`topk_weight / (denominator + 1e-20)`, norm_topk_prob true), then scaled.
            v3 = cfg.get("topk_method") == "noaux_tc"
            logits = m @ w[p + "mlp.gate.weight"].T  # [T, E]
            probs = torch.sigmoid(logits) if v3 else torch.softmax(logits, dim=-1)  # [T, E]
            f = torch.zeros_like(m)  # [T, dim]
            for t in range(T):
                if v3:
                    chosen = route_v3(probs[t], w[p + "mlp.gate.e_score_correction_bias"], cfg)
                else:
                    chosen = sorted(range(cfg["n_routed_experts"]), key=lambda e: (-float(probs[t, e]), e))
                    chosen = chosen[:cfg["num_experts_per_tok"]]
                weights = probs[t, chosen]  # [k]
                if cfg.get("norm_topk_prob"):
                    weights = weights / (weights.sum() + 1e-20)
                for e, weight in zip(chosen, weights):
                    q = p + f"mlp.experts.{e}."
                    f[t] += weight * cfg["routed_scaling_factor"] * g.swiglu(
                        m[t:t + 1], w[q + "gate_proj.weight"], w[q + "up_proj.weight"], w[q + "down_proj.weight"])[0]
            q = p + "mlp.shared_experts."
            f = f + g.swiglu(m, w[q + "gate_proj.weight"], w[q + "up_proj.weight"], w[q + "down_proj.weight"])
        h = h + f
    return g.rmsnorm(h, w["model.norm.weight"], eps) @ w["lm_head.weight"].T  # [T, vocab]


def deepseek2_config(cfg: dict) -> dict:
    """DeepseekV2Config's keys (configuration_deepseek.py), as DeepSeek-V2-Lite's config.json has
    them."""
    keys = {k: cfg[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta",
                                "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                                "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                                "n_shared_experts", "first_k_dense_replace", "routed_scaling_factor",
                                "rope_scaling")}
    return {**keys, "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
            "attention_bias": False, "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 1,
            "eos_token_id": 2, "ep_size": 1, "hidden_act": "silu", "initializer_range": 0.02, "moe_layer_freq": 1,
            "n_group": 1, "norm_topk_prob": False, "num_key_value_heads": cfg["num_attention_heads"],
            "pretraining_tp": 1, "q_lora_rank": None, "scoring_func": "softmax", "seq_aux": True,
            "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy", "torch_dtype": "float32",
            "use_cache": True}


def deepseek3_config(cfg: dict) -> dict:
    """DeepseekV3Config's keys (DeepSeek-V3's configuration_deepseek.py), as DeepSeek-V3's
    config.json has them."""
    keys = {k: cfg[k] for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta",
                                "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                "v_head_dim", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                                "n_shared_experts", "first_k_dense_replace", "routed_scaling_factor", "n_group",
                                "topk_group", "topk_method", "norm_topk_prob", "num_nextn_predict_layers",
                                "rope_scaling")}
    return {**keys, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
            "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1,
            "ep_size": 1, "hidden_act": "silu", "initializer_range": 0.02, "moe_layer_freq": 1,
            "num_key_value_heads": cfg["num_attention_heads"], "pretraining_tp": 1, "scoring_func": "sigmoid",
            "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True}


def base_config(**kw) -> dict:
    cfg = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
               rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, qkv_bias=False,
               qk_norm=None, layout="pre", activation="silu", embed_scale=False,
               attn_softcap=0.0, final_softcap=0.0, query_pre_attn_scalar=None, sliding_window=0,
               sliding_pattern=0, norm_offset=0.0, n_experts=0, n_experts_used=0, expert_ffn=0,
               shared_ffn=0, norm_topk=False, mixtral_names=False, norm="rms", rope="neox",
               logit_scale=0.0, norm_bias=False, gated=True, rope_linear_factor=1.0,
               rope_local_theta=None, parallel_ffn_norm=False)
    cfg.update(kw)
    return cfg


class Float64RotaryAnyArgs(g.Float64Rotary):
    """g.Float64Rotary for rotary modules called with extra arguments (Phi-3's seq_len)."""

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, **_):
        return super().forward(x, position_ids)


class TorchWithFloat64AsFloat(g._TorchWithFloat64As32):
    """Also torch.float (the MoE routers' softmax dtype) as float64."""

    float = torch.float64


class Float64RotaryBySeqLen(g.Float64Rotary):
    """g.Float64Rotary for the older rotary API (Mixtral in the pinned transformers):
    forward(x, seq_len) returns the cos, sin tables [seq_len, hd] of positions 0..seq_len-1."""

    def forward(self, x: torch.Tensor, seq_len: int | None = None, **_):
        cos, sin = super().forward(x, torch.arange(seq_len)[None])  # [1, T, hd]
        return cos[0], sin[0]


def hf_logits(out: Path, model, module, w: dict, tokens: torch.Tensor, rotary_owners,
              inv_freq: torch.Tensor, stand_in=g._TorchWithFloat64As32,
              rotary=Float64RotaryAnyArgs) -> torch.Tensor:
    """Loads w into the HF model, saves the checkpoint to out, returns its float64 logits.

    module: the modeling file, whose float32 casts are kept in float64 as gen_goldens.py does;
    rotary_owners: the modules whose rotary_emb is swapped for the float64 table.
    """
    params = dict(model.named_parameters())
    assert set(params) == set(w), f"parameter set mismatch: {set(params) ^ set(w)}"
    with torch.no_grad():
        for name, value in w.items():
            params[name].copy_(value.to(torch.float32))
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    model = model.double()
    for owner in rotary_owners(model):
        # HF's own inv_freq is float32; the table is built from the float64 one instead.
        assert torch.allclose(owner.rotary_emb.inv_freq.to(F64), inv_freq, rtol=g.TOL_HF_INV_FREQ)
        owner.rotary_emb = rotary(inv_freq)
    saved = module.torch
    module.torch = stand_in()  # RMSNorm / softmax casts stay float64
    try:
        with torch.no_grad():
            logits = model(tokens[None], use_cache=False).logits[0]  # [T, vocab]
    finally:
        module.torch = saved
    assert logits.dtype == F64
    return logits


def common_hf_kwargs(cfg: dict) -> dict:
    return dict(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
                num_attention_heads=cfg["num_attention_heads"], num_key_value_heads=cfg["num_key_value_heads"],
                hidden_act="silu", max_position_embeddings=cfg["max_position_embeddings"],
                rms_norm_eps=cfg["rms_norm_eps"], rope_theta=cfg["rope_theta"],
                tie_word_embeddings=cfg["tie_word_embeddings"], attn_implementation="eager",
                torch_dtype="float32")


def hf_qwen2_logits(out: Path, w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """Qwen2ForCausalLM (eager, float64 inside) on these weights; saves the checkpoint to out."""
    hf_cfg = Qwen2Config(use_sliding_window=False, **common_hf_kwargs(cfg))
    assert hf_cfg.hidden_size // hf_cfg.num_attention_heads == cfg["head_dim"]
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(hf_cfg).eval()
    return hf_logits(out, model, modeling_qwen2, w, tokens, lambda m: [m.model],
                     g.inv_freq_base(cfg["rope_theta"], cfg["head_dim"]))


def hf_phi3_logits(out: Path, w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """Phi3ForCausalLM on these weights, q|k|v and gate|up fused as its checkpoints hold them."""
    hf_cfg = Phi3Config(original_max_position_embeddings=cfg["max_position_embeddings"], rope_scaling=None,
                        sliding_window=cfg["sliding_window"], pad_token_id=None, bos_token_id=1,
                        eos_token_id=2, **common_hf_kwargs(cfg))
    assert hf_cfg.hidden_size // hf_cfg.num_attention_heads == cfg["head_dim"]
    fused = {}
    for name, value in w.items():
        p = name.rsplit(".", 2)[0] + "."  # model.layers.N.self_attn. / .mlp.
        if name.endswith("q_proj.weight"):
            fused[p + "qkv_proj.weight"] = torch.cat(
                [w[p + "q_proj.weight"], w[p + "k_proj.weight"], w[p + "v_proj.weight"]])  # [q+2kv, dim]
        elif name.endswith("gate_proj.weight"):
            fused[p + "gate_up_proj.weight"] = torch.cat([w[p + "gate_proj.weight"], w[p + "up_proj.weight"]])
        elif not name.endswith(("k_proj.weight", "v_proj.weight", "up_proj.weight")):
            fused[name] = value
    torch.manual_seed(0)
    model = Phi3ForCausalLM(hf_cfg).eval()
    return hf_logits(out, model, modeling_phi3, fused, tokens,
                     lambda m: [layer.self_attn for layer in m.model.layers],
                     g.inv_freq_base(cfg["rope_theta"], cfg["head_dim"]))


def float64_gemma_rmsnorm(self, x: torch.Tensor) -> torch.Tensor:
    """Gemma2RMSNorm.forward in the input's dtype (HF's casts x and the weight to float32)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


def hf_gemma2_logits(out: Path, w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """Gemma2ForCausalLM (eager, float64 inside) on these weights; saves the checkpoint to out."""
    kwargs = common_hf_kwargs(cfg)
    del kwargs["hidden_act"]
    hf_cfg = Gemma2Config(head_dim=cfg["head_dim"], hidden_activation="gelu_pytorch_tanh",
                          query_pre_attn_scalar=cfg["query_pre_attn_scalar"],
                          sliding_window=cfg["sliding_window"],
                          attn_logit_softcapping=cfg["attn_softcap"],
                          final_logit_softcapping=cfg["final_softcap"], pad_token_id=0, bos_token_id=1,
                          eos_token_id=2, **kwargs)
    torch.manual_seed(0)
    model = Gemma2ForCausalLM(hf_cfg).eval()
    saved = modeling_gemma2.Gemma2RMSNorm.forward
    modeling_gemma2.Gemma2RMSNorm.forward = float64_gemma_rmsnorm
    try:
        return hf_logits(out, model, modeling_gemma2, w, tokens,
                         lambda m: [layer.self_attn for layer in m.model.layers],
                         g.inv_freq_base(cfg["rope_theta"], cfg["head_dim"]))
    finally:
        modeling_gemma2.Gemma2RMSNorm.forward = saved


def hf_mixtral_logits(out: Path, w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """MixtralForCausalLM (eager, float64 inside, the router's softmax too) on these weights."""
    hf_cfg = MixtralConfig(num_local_experts=cfg["n_experts"], num_experts_per_tok=cfg["n_experts_used"],
                           sliding_window=None, **common_hf_kwargs(cfg))
    torch.manual_seed(0)
    model = MixtralForCausalLM(hf_cfg).eval()
    return hf_logits(out, model, modeling_mixtral, w, tokens,
                     lambda m: [layer.self_attn for layer in m.model.layers],
                     g.inv_freq_base(cfg["rope_theta"], cfg["head_dim"]), TorchWithFloat64AsFloat,
                     Float64RotaryBySeqLen)


def hf_qwen2moe_logits(out: Path, w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """Qwen2MoeForCausalLM on these weights: q/k/v biases, shared expert, no renormalization."""
    hf_cfg = Qwen2MoeConfig(num_experts=cfg["n_experts"], num_experts_per_tok=cfg["n_experts_used"],
                            moe_intermediate_size=cfg["expert_ffn"],
                            shared_expert_intermediate_size=cfg["shared_ffn"], norm_topk_prob=cfg["norm_topk"],
                            use_sliding_window=False, **common_hf_kwargs(cfg))
    torch.manual_seed(0)
    model = Qwen2MoeForCausalLM(hf_cfg).eval()
    return hf_logits(out, model, modeling_qwen2_moe, w, tokens, lambda m: [m.model],
                     g.inv_freq_base(cfg["rope_theta"], cfg["head_dim"]), TorchWithFloat64AsFloat)


def hf_olmoe_logits(out: Path, w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """OlmoeForCausalLM on these weights: QK-norm over the whole projections, experts not
    renormalized."""
    hf_cfg = OlmoeConfig(num_experts=cfg["n_experts"], num_experts_per_tok=cfg["n_experts_used"],
                         norm_topk_prob=cfg["norm_topk"], clip_qkv=None, pad_token_id=None, bos_token_id=1,
                         eos_token_id=2, **common_hf_kwargs(cfg))
    torch.manual_seed(0)
    model = OlmoeForCausalLM(hf_cfg).eval()
    return hf_logits(out, model, modeling_olmoe, w, tokens, lambda m: [m.model],
                     g.inv_freq_base(cfg["rope_theta"], cfg["head_dim"]), TorchWithFloat64AsFloat)


class Float64RotaryInterleaved(g.Float64Rotary):
    """g.Float64Rotary with Cohere's table: each angle repeated for its pair (2i, 2i + 1)."""

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, **_):
        freqs = position_ids.to(F64)[:, :, None] * self.inv_freq[None, None, :]  # [B, T, hd/2]
        emb = torch.repeat_interleave(freqs, 2, dim=-1)  # [B, T, hd]
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def float64_cohere_rope(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    """modeling_cohere.apply_rotary_pos_emb without its q.float() / k.float() downcasts."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rotate = modeling_cohere.rotate_half
    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


def hf_cohere_logits(out: Path, w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """CohereForCausalLM (eager, float64 inside) on these weights: parallel blocks, LayerNorm,
    interleaved RoPE, logit_scale."""
    kwargs = common_hf_kwargs(cfg)
    del kwargs["rms_norm_eps"]
    hf_cfg = CohereConfig(layer_norm_eps=cfg["rms_norm_eps"], logit_scale=cfg["logit_scale"],
                          use_qk_norm=cfg["qk_norm"] == "each_head",
                          pad_token_id=0, bos_token_id=1, eos_token_id=2, **kwargs)
    torch.manual_seed(0)
    model = CohereForCausalLM(hf_cfg).eval()
    saved = modeling_cohere.apply_rotary_pos_emb
    modeling_cohere.apply_rotary_pos_emb = float64_cohere_rope
    try:
        return hf_logits(out, model, modeling_cohere, w, tokens,
                         lambda m: [m.model] + [layer.self_attn for layer in m.model.layers],
                         g.inv_freq_base(cfg["rope_theta"], cfg["head_dim"]), rotary=Float64RotaryInterleaved)
    finally:
        modeling_cohere.apply_rotary_pos_emb = saved


def hf_falcon_logits(out: Path, w: dict, cfg: dict, tokens: torch.Tensor) -> torch.Tensor:
    """FalconForCausalLM (eager, float64) on these weights, the tensors under Falcon's names with
    q|k|v fused: Falcon-7B's form ([q heads | k | v], one KV head), or the new decoder's
    (Falcon-40B: per KV group its query heads, its k and its v; ln_attn and ln_mlp)."""
    new_decoder = cfg["parallel_ffn_norm"]
    hf_cfg = FalconConfig(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                          num_hidden_layers=cfg["num_hidden_layers"], num_attention_heads=cfg["num_attention_heads"],
                          num_kv_heads=cfg["num_key_value_heads"], layer_norm_epsilon=cfg["rms_norm_eps"],
                          multi_query=not new_decoder, parallel_attn=True, new_decoder_architecture=new_decoder,
                          num_ln_in_parallel_attn=2 if new_decoder else None, alibi=False,
                          bias=False, max_position_embeddings=cfg["max_position_embeddings"],
                          rope_theta=cfg["rope_theta"], ffn_hidden_size=cfg["intermediate_size"], activation="gelu",
                          tie_word_embeddings=cfg["tie_word_embeddings"], bos_token_id=1, eos_token_id=2,
                          attn_implementation="eager", torch_dtype="float32")
    assert (cfg["num_key_value_heads"] == 1 or new_decoder) and cfg["tie_word_embeddings"]
    renames = {"model.embed_tokens.": "transformer.word_embeddings.", "model.norm.": "transformer.ln_f.",
               "self_attn.o_proj.": "self_attention.dense.", "mlp.up_proj.": "mlp.dense_h_to_4h.",
               "mlp.down_proj.": "mlp.dense_4h_to_h.", "model.layers.": "transformer.h."}
    if new_decoder:
        renames.update({"input_layernorm.": "ln_attn.", "post_attention_layernorm.": "ln_mlp."})
    hd, kvh = cfg["head_dim"], cfg["num_key_value_heads"]
    group = cfg["num_attention_heads"] // kvh
    falcon = {}
    for name, value in w.items():
        if name.endswith(("k_proj.weight", "v_proj.weight")):
            continue
        if name.endswith("q_proj.weight"):
            p = name[:-len("q_proj.weight")]  # model.layers.N.self_attn.
            q, k, v = w[p + "q_proj.weight"], w[p + "k_proj.weight"], w[p + "v_proj.weight"]
            # Per KV group g: its query heads, its key head, its value head (one group: q|k|v).
            value = torch.cat([torch.cat([q[g * group * hd:(g + 1) * group * hd], k[g * hd:(g + 1) * hd],
                                          v[g * hd:(g + 1) * hd]]) for g in range(kvh)])  # [q+2kv, dim]
            name = p.replace("self_attn.", "self_attention.") + "query_key_value.weight"
        for ours, theirs in renames.items():
            name = name.replace(ours, theirs)
        falcon[name] = value
    torch.manual_seed(0)
    model = FalconForCausalLM(hf_cfg).eval()
    return hf_logits(out, model, modeling_falcon, falcon, tokens,
                     lambda m: [m.transformer] + [layer.self_attention for layer in m.transformer.h],
                     g.inv_freq_base(cfg["rope_theta"], cfg["head_dim"]))


def common_config_keys(cfg: dict) -> dict:
    """config.json keys every family's config class has, at this checkpoint's values."""
    return {"attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
            "hidden_act": "silu", "hidden_size": cfg["hidden_size"], "initializer_range": 0.02,
            "intermediate_size": cfg["intermediate_size"], "max_position_embeddings": cfg["max_position_embeddings"],
            "num_attention_heads": cfg["num_attention_heads"], "num_hidden_layers": cfg["num_hidden_layers"],
            "num_key_value_heads": cfg["num_key_value_heads"], "rms_norm_eps": cfg["rms_norm_eps"],
            "rope_scaling": None, "rope_theta": cfg["rope_theta"], "tie_word_embeddings": cfg["tie_word_embeddings"],
            "torch_dtype": "float32", "use_cache": True, "vocab_size": cfg["vocab_size"]}


def qwen3_config(cfg: dict) -> dict:
    """Qwen3Config's keys (transformers' models/qwen3/configuration_qwen3.py, 4.51)."""
    return {**common_config_keys(cfg), "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "head_dim": cfg["head_dim"], "max_window_layers": cfg["num_hidden_layers"], "sliding_window": None,
            "use_sliding_window": False}


def qwen3moe_config(cfg: dict) -> dict:
    """Qwen3MoeConfig's keys (models/qwen3_moe/configuration_qwen3_moe.py, 4.51)."""
    return {**qwen3_config(cfg), "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
            "decoder_sparse_step": 1, "mlp_only_layers": [], "moe_intermediate_size": cfg["expert_ffn"],
            "norm_topk_prob": cfg["norm_topk"], "num_experts": cfg["n_experts"],
            "num_experts_per_tok": cfg["n_experts_used"], "output_router_logits": False,
            "router_aux_loss_coef": 0.001}


def olmo2_config(cfg: dict) -> dict:
    """Olmo2Config's keys (models/olmo2/configuration_olmo2.py, 4.47)."""
    return {**common_config_keys(cfg), "architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2",
            "pad_token_id": None}


def gemma3_config(cfg: dict) -> dict:
    """Gemma3TextConfig's keys (models/gemma3/configuration_gemma3.py, 4.50), as the Gemma 3 1B
    checkpoint's config.json has them: no tie_word_embeddings (the class ties by default)."""
    keys = {**common_config_keys(cfg), "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "attn_logit_softcapping": None, "cache_implementation": "hybrid",
            "final_logit_softcapping": cfg["final_softcap"] or None, "head_dim": cfg["head_dim"],
            "hidden_activation": "gelu_pytorch_tanh", "pad_token_id": 0,
            "query_pre_attn_scalar": cfg["query_pre_attn_scalar"], "rope_local_base_freq": cfg["rope_local_theta"],
            "rope_scaling": {"factor": cfg["rope_linear_factor"], "rope_type": "linear"},
            "sliding_window": cfg["sliding_window"], "sliding_window_pattern": cfg["sliding_pattern"]}
    assert cfg["tie_word_embeddings"]
    del keys["hidden_act"], keys["tie_word_embeddings"]
    return keys


def gemma3_multimodal(w: dict, cfg: dict, rng: g.Rng) -> tuple[dict, dict]:
    """The same text model as a Gemma3ForConditionalGeneration checkpoint, as Gemma 3 4B-27B's
    are saved: config.json nests Gemma3TextConfig's keys in text_config, leaving out those at
    the class's defaults (here rms_norm_eps, rope_theta, rope_local_base_freq,
    sliding_window_pattern, hidden_activation); the text model's tensors are prefixed
    "language_model." and the vision tower's and projector's sit beside them (two stand-ins,
    which a text-only load leaves unread). -> (tensors, config.json)."""
    text = gemma3_config(cfg)
    defaults = {"rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                "sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh"}
    for key, value in defaults.items():
        assert text[key] == value, key  # the checkpoint's value is the class default
        del text[key]
    del text["architectures"]
    tensors = {"language_model." + k: v for k, v in w.items()}
    tensors["vision_tower.vision_model.embeddings.patch_embedding.weight"] = rng.normal(8, 3, 2, 2)  # [8, 3, 2, 2]
    tensors["multi_modal_projector.mm_input_projection_weight"] = rng.normal(8, cfg["hidden_size"])  # [8, dim]
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "boi_token_index": 125, "eoi_token_index": 126, "image_token_index": 127,
              "initializer_range": 0.02, "mm_tokens_per_image": 4, "text_config": text, "torch_dtype": "float32",
              "vision_config": {"hidden_size": 8, "image_size": 4, "intermediate_size": 16,
                                "model_type": "siglip_vision_model", "num_attention_heads": 2,
                                "num_hidden_layers": 1, "patch_size": 2, "vision_use_head": False}}
    return tensors, config


def write_checkpoint(out: Path, w: dict, config: dict) -> None:
    """config.json and model.safetensors as save_pretrained writes them, for a class the pinned
    transformers lacks: w holds the tensors under the names that class uses."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file({k: v.to(torch.float32).contiguous() for k, v in w.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})


ONLY: set[str] = set()  # the families named on the command line; empty: all


def gen_family(name: str, seed: int, cfg: dict) -> None:
    if ONLY and name not in ONLY:
        return
    out = OUT_DIR / name
    rng = g.Rng(seed)
    tokens = rng.ints(0, cfg["vocab_size"], TOKENS)  # [T]
    deepseek = name.startswith("deepseek")
    w = random_deepseek2_checkpoint(rng, cfg) if deepseek else random_checkpoint(rng, cfg)
    ref = (deepseek2_logits if deepseek else decoder_logits)(w, cfg, tokens)  # [T, vocab]
    note = "textbook float64 only (class not in the pinned transformers)"
    hf_forward = {"qwen2": hf_qwen2_logits, "phi3": hf_phi3_logits, "gemma2": hf_gemma2_logits,
                  "mixtral": hf_mixtral_logits, "qwen2moe": hf_qwen2moe_logits, "olmoe": hf_olmoe_logits,
                  "command-r": hf_cohere_logits, "command-r-plus": hf_cohere_logits,
                  "falcon": hf_falcon_logits, "falcon-40b": hf_falcon_logits}
    hf_config = {"qwen3": qwen3_config, "qwen3moe": qwen3moe_config, "olmo2": olmo2_config,
                 "gemma3": gemma3_config, "deepseek2": deepseek2_config, "deepseek3": deepseek3_config}
    if name == "gemma3-mm":
        write_checkpoint(out, *gemma3_multimodal(w, cfg, rng))
    elif name in hf_forward:
        hf = hf_forward[name](out, w, cfg, tokens)
        err = g.assert_close(f"{name} textbook vs HF", ref, hf, g.TOL_F64)
        note = f"HF {name} float64 max diff {err:.1e}"
    else:
        write_checkpoint(out, w, hf_config[name](cfg))
    g.emit(out, "logits.bin", {"tokens": tokens, "logits": ref},
           f"|logits| max {float(ref.abs().max()):.2f}; {note}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("families", nargs="*", help="only these (default: every family)")
    ONLY.update(ap.parse_args(argv).families)
    # Qwen2: q/k/v biases, tied embeddings (as Qwen2.5-0.5B).
    gen_family("qwen2", 11, base_config(qkv_bias=True, tie_word_embeddings=True))
    # Qwen3: QK-norm, head_dim (32) unrelated to hidden_size / heads (16), as Qwen3-0.6B.
    gen_family("qwen3", 12, base_config(qk_norm="head", head_dim=32))
    # Phi-3: fused q|k|v and gate|up, a sliding window (2047, as Phi-3-mini-4k's) past the prompt.
    gen_family("phi3", 13, base_config(sliding_window=2047, rope_theta=10000.0, rms_norm_eps=1e-5))
    # Gemma 2: sandwich norms scaling by 1 + w, GeGLU, the embedding times sqrt(hidden_size),
    # tied embeddings, and a sliding window (8, inside the prompt) on the even layers of three.
    # The soft-caps are far below Gemma 2's 50 and 30 so that tanh bends these small models'
    # scores and logits; query_pre_attn_scalar is head_dim, as in Gemma 2 2B and 9B (llama.cpp
    # derives the scale from head_dim and ignores the key).
    gen_family("gemma2", 14, base_config(num_hidden_layers=3, layout="sandwich", activation="gelu_tanh",
                                         embed_scale=True, tie_word_embeddings=True, attn_softcap=5.0,
                                         final_softcap=3.0, query_pre_attn_scalar=16, sliding_window=8,
                                         sliding_pattern=2, norm_offset=1.0, rope_theta=10000.0))
    # Mixtral (llama files with experts): 4 experts, top-2, the chosen weights renormalized.
    gen_family("mixtral", 15, base_config(n_experts=4, n_experts_used=2, expert_ffn=96, norm_topk=True,
                                          mixtral_names=True))
    # Qwen2-MoE: 4 experts of width 64, top-2 not renormalized, a shared expert of 160 with its
    # sigmoid gate, q/k/v biases.
    gen_family("qwen2moe", 16, base_config(n_experts=4, n_experts_used=2, expert_ffn=64, shared_ffn=160,
                                           qkv_bias=True))
    # Qwen3-MoE: Qwen3's per-head QK-norm and head_dim, 4 experts of width 64 (narrower than
    # intermediate_size, as moe_intermediate_size is in Qwen3-30B-A3B), top-2 renormalized.
    gen_family("qwen3moe", 17, base_config(qk_norm="head", head_dim=32, n_experts=4, n_experts_used=2,
                                           expert_ffn=64, norm_topk=True))
    # OLMoE: QK-norm over the whole q and k projections, 4 experts top-2 not renormalized; eps
    # 1e-5, which llama.cpp's converter writes whatever config.json says.
    gen_family("olmoe", 18, base_config(qk_norm="whole", n_experts=4, n_experts_used=2, expert_ffn=96,
                                        rms_norm_eps=1e-5, rope_theta=10000.0))
    # OLMo 2: post-norm blocks (norms on the sublayers' outputs only) and OLMoE's QK-norm.
    gen_family("olmo2", 19, base_config(layout="post", qk_norm="whole", rope_theta=500000.0))
    # Command-R: parallel blocks on one weight-only LayerNorm, interleaved RoPE, tied
    # embeddings, logits scaled by 0.25 (not Cohere's default 0.0625, so that reading the key
    # shows); eps 1e-5, Cohere's.
    gen_family("command-r", 20, base_config(layout="parallel", norm="layer", rope="interleaved",
                                            tie_word_embeddings=True, logit_scale=0.25, rms_norm_eps=1e-5,
                                            rope_theta=8000000.0))
    # Command R+: Command-R's blocks plus a LayerNorm of q and k per head, each head with its own
    # weights (use_qk_norm; q_norm [heads, head_dim]), before RoPE; two KV heads.
    gen_family("command-r-plus", 28, base_config(layout="parallel", norm="layer", rope="interleaved",
                                                 qk_norm="each_head", tie_word_embeddings=True,
                                                 logit_scale=0.25, rms_norm_eps=1e-5, rope_theta=8000000.0))
    # Falcon (7B's form): parallel blocks on a LayerNorm with bias, one KV head with q|k|v fused, a
    # plain MLP of 4·hidden_size (the width llama.cpp's converter writes) with the exact GELU,
    # tied embeddings.
    gen_family("falcon", 21, base_config(layout="parallel", norm="layer", norm_bias=True, gated=False,
                                         num_key_value_heads=1, intermediate_size=256,
                                         tie_word_embeddings=True, rms_norm_eps=1e-5, rope_theta=10000.0))
    # Falcon-40B's form (new_decoder_architecture): Falcon-7B's blocks with two KV heads, q|k|v
    # fused per KV group, and two input norms per block (ln_attn for attention, ln_mlp for the
    # MLP), each a LayerNorm with bias.
    gen_family("falcon-40b", 29, base_config(layout="parallel", norm="layer", norm_bias=True, gated=False,
                                             parallel_ffn_norm=True, num_attention_heads=4, num_key_value_heads=2,
                                             intermediate_size=256, tie_word_embeddings=True, rms_norm_eps=1e-5,
                                             rope_theta=10000.0))
    # Gemma 3 (the text model, Gemma3ForCausalLM): Gemma 2's sandwich norms, GeGLU and scaled
    # embedding, Qwen3's per-head QK-norm (scaling by 1 + w, as every Gemma norm), a window (8)
    # on five layers of six with their own RoPE base (10000, unscaled) while the sixth rotates
    # with rope_theta and linear scaling (factor 4, as the 4B and larger checkpoints have 8);
    # no attention soft-cap, a final one (20, where Gemma 3 has none, so that reading it shows;
    # it bends only the largest of these logits, whose scale is ~10, and squashes no error).
    # Six layers: llama.cpp's converter writes no window pattern, its reader takes 6.
    gen_family("gemma3", 22, base_config(num_hidden_layers=6, layout="sandwich", activation="gelu_tanh",
                                         qk_norm="head", embed_scale=True, tie_word_embeddings=True,
                                         final_softcap=20.0, query_pre_attn_scalar=16, sliding_window=8,
                                         sliding_pattern=6, norm_offset=1.0, rope_theta=1000000.0,
                                         rope_linear_factor=4.0, rope_local_theta=10000.0))
    # Gemma 3's multimodal checkpoints (4B and larger, Gemma3ForConditionalGeneration): gemma3's
    # text model and logits (the same seed and shape), saved as those checkpoints are.
    gen_family("gemma3-mm", 22, base_config(num_hidden_layers=6, layout="sandwich", activation="gelu_tanh",
                                            qk_norm="head", embed_scale=True, tie_word_embeddings=True,
                                            final_softcap=20.0, query_pre_attn_scalar=16, sliding_window=8,
                                            sliding_pattern=6, norm_offset=1.0, rope_theta=1000000.0,
                                            rope_linear_factor=4.0, rope_local_theta=10000.0))
    # DeepSeek-V2 (V2-Lite's form: no query low-rank projection): latent attention with a latent
    # of 64 and RoPE keys of 16 (interleaved), YaRN (factor 4 past 16 positions, mscale 0.707 on
    # the scores as V2-Lite's), one leading dense layer, then 4 experts top-2 (not renormalized,
    # weights times 2, where V2-Lite has 1, so that reading it shows) and two ungated shared
    # experts.
    gen_family("deepseek2", 23, dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0, kv_lora_rank=64, qk_nope_head_dim=32,
        qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        n_shared_experts=2, first_k_dense_replace=1, routed_scaling_factor=2.0,
        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32,
                      "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}))
    # DeepSeek-V3's form: low-rank queries (q_lora_rank 64), a latent of 32 and RoPE keys of 8,
    # YaRN with V3's mscale = mscale_all_dim = 1 (cos and sin unscaled, scores times mscale²),
    # one leading dense layer, then 8 experts in 4 groups, 2 groups kept, top-2 by sigmoid score
    # plus a selection bias, renormalized and times 2.5 (V3's), one ungated shared expert; a
    # multi-token prediction layer after the three that inference skips.
    gen_family("deepseek3", 27, dict(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0, kv_lora_rank=32, q_lora_rank=64,
        qk_nope_head_dim=32, qk_rope_head_dim=8, v_head_dim=24, n_routed_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
        n_group=4, topk_group=2, topk_method="noaux_tc", norm_topk_prob=True, num_nextn_predict_layers=1,
        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "beta_fast": 32,
                      "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
