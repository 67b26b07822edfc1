#!/usr/bin/env python3
"""Golden (reference) data generator for the hllm C++ tests.

Writes the binary files under tests/goldens/ that the C++ tests compare the
library against. The output is committed to the repository; this script only
needs to be re-run when a golden file is added or changed:

    tools/setup_python.sh && .venv-tools/bin/python tools/gen_goldens.py

(`--out-dir DIR` writes elsewhere, e.g. to check that a re-run is
byte-identical.) It runs on the CPU in a few seconds and is deterministic (fixed
seeds, one torch.Generator per file).

Independent references
----------------------
* Each building block (RMSNorm, RoPE, attention, SwiGLU, a decoder block) is
  computed from the textbook formula, in float64, by the code in this file.
* Where Hugging Face transformers has the same thing, the textbook result is
  checked against it and the script fails on disagreement:
    - RoPE inverse frequencies vs transformers.modeling_rope_utils.
      ROPE_INIT_FUNCTIONS ("default", "linear", "dynamic" for the NTK case,
      "yarn", "llama3"); HF computes them in float32, so within 1e-6 relative;
    - RoPE application vs HF's apply_rotary_pos_emb (rotate_half);
    - RMSNorm vs LlamaRMSNorm, SwiGLU vs LlamaMLP, the block vs
      LlamaDecoderLayer (with Wq/Wk rows permuted from the interleaved to HF's
      half-split layout), all within 1e-9;
    - the whole model: the golden logits come from HF's LlamaForCausalLM
      (attn_implementation="eager", float64) and a textbook float64 forward
      written here must reproduce them within 1e-9.
* transformers 4.46.3 (pinned in tools/requirements.txt) is used on Debian's
  torch 1.13.

HF in float64: three places in transformers' Llama code cast to float32 on
purpose (for fp16/bf16 safety): RMSNorm's variance, the eager softmax, and the
RoPE cos/sin table. Run on a float64 model those would round the golden values
to float32 precision. hf_float64() below therefore (a) makes modeling_llama
see torch.float32 as torch.float64 (a module-level stand-in for `torch`; no HF
code is rewritten) and (b) swaps in a rotary module that builds the same
half-split cos/sin table in float64 from the float64 inverse frequencies. The
unpatched HF model is also run, and must agree with the golden logits to within
float32 rounding (checked too).

File format (the C++ test reader relies on it)
----------------------------------------------
Little-endian. Header: 8 ASCII bytes "HLLMGLD1", then u32 n_entries. Each
entry: u32 name_len, name_len ASCII bytes, u32 ndim, ndim x u64 dims, then
prod(dims) float32 values in row-major order (ndim 0 = scalar, one value).
Integers (token ids, positions, config values) are stored as float32; they are
small enough to be exact. Entries keep the insertion order used here.

Conventions: linear weights are stored as PyTorch nn.Linear holds them,
[out_features, in_features] row-major, y = x @ W^T. Every random input is
rounded to float32 *before* it is used, so the float32 values in a file are
exactly the inputs the float64 reference consumed.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import struct
import sys
from pathlib import Path

import numpy as np
import torch

torch.set_default_dtype(torch.float32)
F64 = torch.float64

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = ROOT / "tests" / "goldens"

MAGIC = b"HLLMGLD1"

# Tolerances of the cross-checks.
TOL_F64 = 1e-9  # two float64 computations of the same thing
TOL_HF_INV_FREQ = 1e-6  # HF computes RoPE inverse frequencies in float32 (relative)


# --------------------------------------------------------------------------
# File format
# --------------------------------------------------------------------------


def _to_f32_array(value) -> np.ndarray:
    """Any tensor / array / number -> float32 numpy array (must be finite)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().to(F64).numpy()
    arr64 = np.asarray(value, dtype=np.float64)
    if not np.all(np.isfinite(arr64)):
        raise ValueError("non-finite value in golden entry")
    return arr64.astype("<f4")


def write_goldens(path: Path, entries: dict) -> int:
    """Write `entries` (name -> tensor/array/number, insertion order kept) to `path`.

    Returns the file size in bytes.
    """
    chunks = [MAGIC, struct.pack("<I", len(entries))]
    for name, value in entries.items():
        arr = _to_f32_array(value)
        name_bytes = name.encode("ascii")
        chunks.append(struct.pack("<I", len(name_bytes)))
        chunks.append(name_bytes)
        chunks.append(struct.pack("<I", arr.ndim))
        chunks.append(struct.pack(f"<{arr.ndim}Q", *arr.shape))
        chunks.append(np.ascontiguousarray(arr).tobytes(order="C"))
    data = b"".join(chunks)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)


def read_goldens(path: Path) -> dict:
    """Inverse of write_goldens (used to verify every file after writing it)."""
    data = path.read_bytes()
    if data[:8] != MAGIC:
        raise ValueError(f"{path}: bad magic")
    (n,) = struct.unpack_from("<I", data, 8)
    off = 12
    out = {}
    for _ in range(n):
        (name_len,) = struct.unpack_from("<I", data, off)
        off += 4
        name = data[off : off + name_len].decode("ascii")
        off += name_len
        (ndim,) = struct.unpack_from("<I", data, off)
        off += 4
        dims = struct.unpack_from(f"<{ndim}Q", data, off)
        off += 8 * ndim
        count = int(np.prod(dims, dtype=np.int64))  # prod(()) == 1 for scalars
        out[name] = np.frombuffer(data, dtype="<f4", count=count, offset=off).reshape(dims)
        off += 4 * count
    if off != len(data):
        raise ValueError(f"{path}: {len(data) - off} trailing bytes")
    return out


def emit(out_dir: Path, filename: str, entries: dict, note: str) -> None:
    """Write one golden file, read it back to verify, print a one-line summary."""
    path = out_dir / filename
    size = write_goldens(path, entries)
    back = read_goldens(path)
    assert list(back) == list(entries), "entry order/names changed on round trip"
    for name, value in entries.items():
        assert np.array_equal(back[name], _to_f32_array(value)), name
    try:
        shown = path.relative_to(ROOT)
    except ValueError:
        shown = path
    print(f"{shown}: {len(entries)} entries, {size} bytes; {note}")


# --------------------------------------------------------------------------
# Random inputs
# --------------------------------------------------------------------------


def f32_exact(t: torch.Tensor) -> torch.Tensor:
    """Round to float32 and back, so the float64 reference uses exactly the stored inputs."""
    return t.to(torch.float32).to(F64)


class Rng:
    """Seeded generator of float32-representable float64 tensors."""

    def __init__(self, seed: int):
        self.g = torch.Generator().manual_seed(seed)

    def normal(self, *shape: int, std: float = 1.0) -> torch.Tensor:
        """N(0, std^2) of the given shape."""
        return f32_exact(torch.randn(shape, generator=self.g, dtype=F64) * std)

    def linear(self, out_features: int, in_features: int) -> torch.Tensor:
        """Projection weight [out, in], std 1/sqrt(in)."""
        return self.normal(out_features, in_features, std=1.0 / math.sqrt(in_features))

    def norm_weight(self, n: int) -> torch.Tensor:
        """Norm weight [n] = 1 + 0.1 * N(0, 1)."""
        return f32_exact(1.0 + 0.1 * torch.randn((n,), generator=self.g, dtype=F64))

    def ints(self, low: int, high: int, n: int) -> torch.Tensor:
        """n uniform integers in [low, high) as int64 [n]."""
        return torch.randint(low, high, (n,), generator=self.g, dtype=torch.int64)


# --------------------------------------------------------------------------
# Textbook reference implementations (float64)
# --------------------------------------------------------------------------


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x: [..., d], weight: [d] -> [..., d]: x / sqrt(mean(x^2) + eps) * weight."""
    ms = (x * x).mean(dim=-1, keepdim=True)  # [..., 1]
    return x / torch.sqrt(ms + eps) * weight


def inv_freq_base(theta: float, rot_dims: int) -> torch.Tensor:
    """[rot_dims/2]: inv_freq[i] = theta^(-2i/rot_dims)."""
    i = torch.arange(rot_dims // 2, dtype=F64)  # [rot/2]
    return theta ** (-2.0 * i / rot_dims)


def inv_freq_linear(theta: float, rot_dims: int, factor: float) -> torch.Tensor:
    """[rot_dims/2]: position interpolation, inv_freq / factor."""
    return inv_freq_base(theta, rot_dims) / factor


def inv_freq_ntk(theta: float, rot_dims: int, factor: float) -> torch.Tensor:
    """[rot_dims/2]: NTK-aware scaling, theta' = theta * factor^(rot/(rot-2))."""
    return inv_freq_base(theta * factor ** (rot_dims / (rot_dims - 2)), rot_dims)


def yarn_params(theta: float, rot_dims: int, factor: float, original_context: int,
                beta_fast: float, beta_slow: float) -> tuple[torch.Tensor, float]:
    """YaRN (arXiv:2309.00071) as in HF _compute_yarn_parameters.

    Returns (inv_freq [rot_dims/2], mscale).
    """
    half = rot_dims // 2
    i = torch.arange(half, dtype=F64)  # [rot/2]
    pos_freqs = theta ** (2.0 * i / rot_dims)  # [rot/2]
    inv_extrapolation = 1.0 / pos_freqs  # [rot/2] original frequencies
    inv_interpolation = 1.0 / (factor * pos_freqs)  # [rot/2] interpolated frequencies

    def correction_dim(num_rotations: float) -> float:
        # Dimension whose wavelength makes `num_rotations` turns over original_context.
        return (rot_dims * math.log(original_context / (num_rotations * 2 * math.pi))) / (2 * math.log(theta))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), rot_dims - 1)
    if low == high:
        high += 0.001  # avoid division by zero, as HF does
    ramp = ((i - low) / (high - low)).clamp(0.0, 1.0)  # [rot/2]
    extrap_factor = 1.0 - ramp  # [rot/2] 1 = keep original frequency
    inv_freq = inv_interpolation * (1.0 - extrap_factor) + inv_extrapolation * extrap_factor
    mscale = 0.1 * math.log(factor) + 1.0
    return inv_freq, mscale


def inv_freq_llama3(theta: float, rot_dims: int, factor: float, low_freq_factor: float,
                    high_freq_factor: float, original_context: int) -> torch.Tensor:
    """[rot_dims/2]: Llama-3.1 frequency scaling (HF _compute_llama3_parameters)."""
    inv = inv_freq_base(theta, rot_dims)  # [rot/2]
    low_freq_wavelen = original_context / low_freq_factor
    high_freq_wavelen = original_context / high_freq_factor
    out = torch.empty_like(inv)  # [rot/2]
    for j, f in enumerate(inv.tolist()):
        wavelen = 2 * math.pi / f
        if wavelen < high_freq_wavelen:  # high frequency: unchanged
            out[j] = f
        elif wavelen > low_freq_wavelen:  # low frequency: interpolated
            out[j] = f / factor
        else:  # in between: smooth blend
            smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out[j] = (1 - smooth) * f / factor + smooth * f
    return out


def rope_pair_indices(layout: str, rot_dims: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (a [rot/2], b [rot/2]) of the pairs rotated together with inv_freq[i]."""
    half = rot_dims // 2
    if layout == "interleaved":  # pairs (2i, 2i+1)
        return torch.arange(0, rot_dims, 2), torch.arange(1, rot_dims, 2)
    if layout == "neox":  # pairs (i, i + rot/2)
        return torch.arange(half), torch.arange(half, rot_dims)
    raise ValueError(layout)


def apply_rope(x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor, layout: str,
               mscale: float = 1.0) -> torch.Tensor:
    """x: [T, H, D], pos: [T], inv_freq: [rot/2] -> [T, H, D].

    Rotates the first rot = 2*len(inv_freq) dims of each head; the rest pass through.
    """
    rot_dims = 2 * inv_freq.numel()
    angle = pos.to(F64)[:, None] * inv_freq[None, :]  # [T, rot/2]
    cos = (torch.cos(angle) * mscale)[:, None, :]  # [T, 1, rot/2]
    sin = (torch.sin(angle) * mscale)[:, None, :]  # [T, 1, rot/2]
    ia, ib = rope_pair_indices(layout, rot_dims)
    a, b = x[..., ia], x[..., ib]  # [T, H, rot/2] each
    out = x.clone()  # [T, H, D]
    out[..., ia] = a * cos - b * sin
    out[..., ib] = a * sin + b * cos
    return out


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int = 0,
              scale: float | None = None, softcap: float = 0.0) -> torch.Tensor:
    """Causal (G/M)QA. q: [T, H, D], k, v: [T, KVH, D] -> [T, H, D].

    Query head h reads kv head h // (H/KVH). With window W > 0 the query at
    position p sees keys at positions in (p - W, p]. Scores are q.k * scale
    (default 1/sqrt(D)), then softcap * tanh(score / softcap) when softcap > 0
    (Gemma 2's attention logit soft-capping).
    """
    T, H, D = q.shape
    group = H // k.shape[1]
    k_rep = k.repeat_interleave(group, dim=1)  # [T, H, D]
    v_rep = v.repeat_interleave(group, dim=1)  # [T, H, D]
    scores = torch.einsum("ihd,jhd->hij", q, k_rep) * (1.0 / math.sqrt(D) if scale is None else scale)  # [H, Tq, Tk]
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    p = torch.arange(T)[:, None]  # [Tq, 1] query positions
    j = torch.arange(T)[None, :]  # [1, Tk] key positions
    visible = j <= p  # [Tq, Tk]
    if window > 0:
        visible &= j > p - window
    scores = scores.masked_fill(~visible, float("-inf"))  # [H, Tq, Tk]
    probs = torch.softmax(scores, dim=-1)  # [H, Tq, Tk]
    return torch.einsum("hij,jhd->ihd", probs, v_rep)  # [T, H, D]


def attention_loop(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int = 0) -> torch.Tensor:
    """Same as attention(), one query and head at a time (a second, plain implementation)."""
    T, H, D = q.shape
    group = H // k.shape[1]
    out = torch.zeros_like(q)  # [T, H, D]
    for p in range(T):
        first = max(0, p - window + 1) if window > 0 else 0
        for h in range(H):
            kv = h // group
            s = [float(q[p, h] @ k[j, kv]) / math.sqrt(D) for j in range(first, p + 1)]
            m = max(s)
            w = [math.exp(x - m) for x in s]
            z = sum(w)
            for n, j in enumerate(range(first, p + 1)):
                out[p, h] += (w[n] / z) * v[j, kv]
    return out


def swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """x: [T, d], w_gate, w_up: [f, d], w_down: [d, f] -> [T, d]."""
    g = x @ w_gate.T  # [T, f]
    u = x @ w_up.T  # [T, f]
    silu = g / (1.0 + torch.exp(-g))  # [T, f]
    return (silu * u) @ w_down.T  # [T, d]


def llama_block(x: torch.Tensor, w: dict, pos: torch.Tensor, n_heads: int, n_kv_heads: int,
                eps: float, inv_freq: torch.Tensor, layout: str) -> torch.Tensor:
    """Pre-norm Llama decoder block. x: [T, dim] -> [T, dim].

    w holds attn_norm [dim], wq [H*hd, dim], wk, wv [KVH*hd, dim], wo [dim, H*hd],
    ffn_norm [dim], w_gate, w_up [f, dim], w_down [dim, f].
    """
    T, dim = x.shape
    hd = dim // n_heads
    n = rmsnorm(x, w["attn_norm"], eps)  # [T, dim]
    q = (n @ w["wq"].T).reshape(T, n_heads, hd)  # [T, H, hd]
    k = (n @ w["wk"].T).reshape(T, n_kv_heads, hd)  # [T, KVH, hd]
    v = (n @ w["wv"].T).reshape(T, n_kv_heads, hd)  # [T, KVH, hd]
    q = apply_rope(q, pos, inv_freq, layout)  # [T, H, hd]
    k = apply_rope(k, pos, inv_freq, layout)  # [T, KVH, hd]
    a = attention(q, k, v).reshape(T, n_heads * hd)  # [T, H*hd]
    h = x + a @ w["wo"].T  # [T, dim]
    return h + swiglu(rmsnorm(h, w["ffn_norm"], eps), w["w_gate"], w["w_up"], w["w_down"])  # [T, dim]


# --------------------------------------------------------------------------
# Hugging Face helpers
# --------------------------------------------------------------------------

import transformers  # noqa: E402  (after torch setup on purpose)
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.llama import modeling_llama  # noqa: E402

transformers.logging.set_verbosity_error()


class _TorchWithFloat64As32:
    """Stand-in for the `torch` module inside modeling_llama: torch.float32 means float64.

    modeling_llama upcasts RMSNorm and the eager softmax with `torch.float32`;
    for a float64 model that is a downcast. Everything else is plain torch.
    """

    float32 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


@contextlib.contextmanager
def hf_float64():
    """Within this block HF's Llama modules keep float64 inputs in float64 throughout."""
    saved = modeling_llama.torch
    modeling_llama.torch = _TorchWithFloat64As32()
    try:
        yield
    finally:
        modeling_llama.torch = saved


class Float64Rotary(torch.nn.Module):
    """Drop-in for LlamaRotaryEmbedding computing the (half-split) cos/sin table in float64."""

    def __init__(self, inv_freq: torch.Tensor, attention_scaling: float = 1.0):
        super().__init__()
        self.register_buffer("inv_freq", inv_freq.to(F64), persistent=False)  # [hd/2]
        self.attention_scaling = attention_scaling

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        # position_ids: [B, T] -> cos, sin: [B, T, hd]
        freqs = position_ids.to(F64)[:, :, None] * self.inv_freq[None, None, :]  # [B, T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [B, T, hd]
        return ((emb.cos() * self.attention_scaling).to(x.dtype),
                (emb.sin() * self.attention_scaling).to(x.dtype))


def hf_rope_config(theta: float, head_dim: int, rot_dims: int, max_pos: int = 2048,
                   rope_scaling: dict | None = None) -> LlamaConfig:
    """A one-head LlamaConfig, only for calling ROPE_INIT_FUNCTIONS."""
    return LlamaConfig(hidden_size=head_dim, num_attention_heads=1, num_key_value_heads=1,
                       rope_theta=theta, partial_rotary_factor=rot_dims / head_dim,
                       max_position_embeddings=max_pos, rope_scaling=rope_scaling)


def assert_close(name: str, got: torch.Tensor, want: torch.Tensor, tol: float, rel: bool = False) -> float:
    """Max abs (or relative) difference; raises when above tol."""
    got, want = torch.as_tensor(got, dtype=F64), torch.as_tensor(want, dtype=F64)
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    diff = (got - want).abs()
    if rel:
        diff = diff / want.abs().clamp_min(1e-300)
    err = float(diff.max()) if diff.numel() else 0.0
    if not err <= tol:
        raise AssertionError(f"cross-check {name}: max {'rel' if rel else 'abs'} diff {err:.3g} > {tol:g}")
    return err


def neox_perm(rot_dims: int) -> torch.Tensor:
    """[rot]: neox position j holds interleaved position perm[j] (pairs (2i,2i+1) -> (i, i+rot/2))."""
    return torch.cat([torch.arange(0, rot_dims, 2), torch.arange(1, rot_dims, 2)])


# --------------------------------------------------------------------------
# Golden files
# --------------------------------------------------------------------------


def gen_rmsnorm(out_dir: Path) -> None:
    rng = Rng(1)
    eps = 1e-5
    x = rng.normal(7, 96)  # [7, 96]
    weight = rng.norm_weight(96)  # [96]
    out = rmsnorm(x, weight, eps)  # [7, 96]

    hf = modeling_llama.LlamaRMSNorm(96, eps=eps).double()
    with torch.no_grad(), hf_float64():
        hf.weight.copy_(weight)
        err = assert_close("rmsnorm vs LlamaRMSNorm", hf(x), out, TOL_F64)

    emit(out_dir, "rmsnorm.bin", {"x": x, "weight": weight, "eps": eps, "out": out},
         f"HF LlamaRMSNorm max diff {err:.1e}")


def gen_rope(out_dir: Path) -> None:
    rng = Rng(2)
    T, H, D = 9, 3, 64
    pos = torch.tensor([0, 1, 2, 5, 17, 100, 255, 511, 1000], dtype=torch.int64)  # [T]
    entries: dict = {}
    max_inv_err = max_apply_err = 0.0

    def case(name: str, layout: str, theta: float, rot: int, inv_freq: torch.Tensor,
             hf_inv_freq: torch.Tensor, mscale: float = 1.0, extra: dict | None = None) -> None:
        nonlocal max_inv_err, max_apply_err
        # Two sources for the frequencies: textbook (float64) and HF (float32).
        max_inv_err = max(max_inv_err, assert_close(f"rope {name} inv_freq vs HF", hf_inv_freq, inv_freq,
                                                     TOL_HF_INV_FREQ, rel=True))
        x = rng.normal(T, H, D)  # [T, H, D]
        out = apply_rope(x, pos, inv_freq, layout, mscale)  # [T, H, D]

        # Cross-check the rotation with HF's apply_rotary_pos_emb (half-split
        # layout): bring interleaved pairs into half-split order and back.
        perm = neox_perm(rot) if layout == "interleaved" else torch.arange(rot)  # [rot]
        xr = x[..., :rot][..., perm].permute(1, 0, 2)[None]  # [1, H, T, rot]
        ang = pos.to(F64)[:, None] * inv_freq[None, :]  # [T, rot/2]
        emb = torch.cat((ang, ang), dim=-1)[None]  # [1, T, rot]
        hf_rot, _ = modeling_llama.apply_rotary_pos_emb(xr, xr, emb.cos() * mscale, emb.sin() * mscale)
        hf_out = x.clone()  # [T, H, D]
        hf_out[..., perm] = hf_rot[0].permute(1, 0, 2)  # rotated dims back in file layout
        max_apply_err = max(max_apply_err, assert_close(f"rope {name} vs HF apply_rotary_pos_emb",
                                                        hf_out, out, TOL_F64))

        entries[f"{name}.x"] = x
        entries[f"{name}.pos"] = pos
        entries[f"{name}.theta"] = theta
        entries[f"{name}.rot_dims"] = rot
        for key, value in (extra or {}).items():
            entries[f"{name}.{key}"] = value
        entries[f"{name}.inv_freq"] = inv_freq  # [rot/2]
        entries[f"{name}.mscale"] = mscale
        entries[f"{name}.out"] = out  # [T, H, D]

    def hf_inv(cfg: LlamaConfig, rope_type: str, **kw) -> tuple[torch.Tensor, float]:
        inv, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", **kw)
        return inv, attention_factor

    # Unscaled, full and partial rotation, both layouts.
    for name, layout, rot in (("interleaved", "interleaved", 64), ("neox", "neox", 64),
                              ("partial_interleaved", "interleaved", 32), ("partial_neox", "neox", 32)):
        hf, _ = hf_inv(hf_rope_config(10000.0, D, rot), "default")
        case(name, layout, 10000.0, rot, inv_freq_base(10000.0, rot), hf)

    # Linear position interpolation.
    factor = 4.0
    hf, _ = hf_inv(hf_rope_config(10000.0, D, 64, rope_scaling={"rope_type": "linear", "factor": factor}), "linear")
    case("linear", "neox", 10000.0, 64, inv_freq_linear(10000.0, 64, factor), hf, extra={"factor": factor})

    # NTK-aware: HF's "dynamic" type gives theta * factor^(rot/(rot-2)) exactly
    # when factor * seq_len / max_pos - (factor - 1) == factor, i.e. seq_len = max_pos * (2 - 1/factor).
    max_pos = 128
    hf, _ = hf_inv(hf_rope_config(10000.0, D, 64, max_pos=max_pos,
                                  rope_scaling={"rope_type": "dynamic", "factor": factor}),
                   "dynamic", seq_len=int(max_pos * (2 - 1 / factor)))
    case("ntk", "interleaved", 10000.0, 64, inv_freq_ntk(10000.0, 64, factor), hf, extra={"factor": factor})

    # YaRN. In transformers 4.46 the original context is config.max_position_embeddings.
    yarn = {"factor": 4.0, "original_context": 128, "beta_fast": 32.0, "beta_slow": 1.0}
    inv, mscale = yarn_params(10000.0, 64, **yarn)
    hf, hf_mscale = hf_inv(hf_rope_config(10000.0, D, 64, max_pos=yarn["original_context"], rope_scaling={
        "rope_type": "yarn", "factor": yarn["factor"], "beta_fast": yarn["beta_fast"],
        "beta_slow": yarn["beta_slow"]}), "yarn")
    assert_close("rope yarn mscale vs HF", torch.tensor(hf_mscale), torch.tensor(mscale), 1e-12)
    case("yarn", "neox", 10000.0, 64, inv, hf, mscale=mscale, extra=yarn)

    # Llama 3.1.
    l3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_context": 64}
    hf, _ = hf_inv(hf_rope_config(500000.0, D, 64, rope_scaling={
        "rope_type": "llama3", "factor": l3["factor"], "low_freq_factor": l3["low_freq_factor"],
        "high_freq_factor": l3["high_freq_factor"],
        "original_max_position_embeddings": l3["original_context"]}), "llama3")
    case("llama3", "neox", 500000.0, 64, inv_freq_llama3(500000.0, 64, **l3), hf, extra=l3)

    emit(out_dir, "rope.bin", entries,
         f"HF inv_freq max rel diff {max_inv_err:.1e}, HF rotation max diff {max_apply_err:.1e}")


def gen_attention(out_dir: Path) -> None:
    rng = Rng(3)
    T, D = 37, 32
    entries: dict = {}
    max_err = 0.0
    for name, H, KVH, W in (("mha", 4, 4, 0), ("gqa", 8, 2, 0), ("mqa", 4, 1, 0),
                            ("mha_sw", 4, 4, 5), ("gqa_sw", 8, 2, 5), ("mqa_sw", 4, 1, 5)):
        q = rng.normal(T, H, D)  # [T, H, D]
        k = rng.normal(T, KVH, D)  # [T, KVH, D]
        v = rng.normal(T, KVH, D)  # [T, KVH, D]
        out = attention(q, k, v, W)  # [T, H, D]
        max_err = max(max_err, assert_close(f"attention {name} vs loop", attention_loop(q, k, v, W), out, TOL_F64))
        entries.update({f"{name}.q": q, f"{name}.k": k, f"{name}.v": v, f"{name}.window": W, f"{name}.out": out})
    emit(out_dir, "attention.bin", entries, f"loop implementation max diff {max_err:.1e}")


def gen_swiglu(out_dir: Path) -> None:
    rng = Rng(4)
    x = rng.normal(5, 64)  # [5, 64]
    w_gate = rng.linear(160, 64)  # [160, 64]
    w_up = rng.linear(160, 64)  # [160, 64]
    w_down = rng.linear(64, 160)  # [64, 160]
    out = swiglu(x, w_gate, w_up, w_down)  # [5, 64]

    hf = modeling_llama.LlamaMLP(LlamaConfig(hidden_size=64, intermediate_size=160, hidden_act="silu")).double()
    with torch.no_grad():
        hf.gate_proj.weight.copy_(w_gate)
        hf.up_proj.weight.copy_(w_up)
        hf.down_proj.weight.copy_(w_down)
        err = assert_close("swiglu vs LlamaMLP", hf(x), out, TOL_F64)

    emit(out_dir, "swiglu.bin", {"x": x, "w_gate": w_gate, "w_up": w_up, "w_down": w_down, "out": out},
         f"HF LlamaMLP max diff {err:.1e}")


def block_weights(rng: Rng, dim: int, n_heads: int, n_kv_heads: int, hd: int, ffn: int) -> dict:
    """One Llama block's weights, drawn from rng in this order (the goldens depend on it)."""
    return {
        "attn_norm": rng.norm_weight(dim),  # [dim]
        "wq": rng.linear(n_heads * hd, dim),  # [n_heads·hd, dim]
        "wk": rng.linear(n_kv_heads * hd, dim),  # [n_kv_heads·hd, dim]
        "wv": rng.linear(n_kv_heads * hd, dim),  # [n_kv_heads·hd, dim]
        "wo": rng.linear(dim, n_heads * hd),  # [dim, n_heads·hd]
        "ffn_norm": rng.norm_weight(dim),  # [dim]
        "w_gate": rng.linear(ffn, dim),  # [ffn, dim]
        "w_up": rng.linear(ffn, dim),  # [ffn, dim]
        "w_down": rng.linear(dim, ffn),  # [dim, ffn]
    }


def gen_block(out_dir: Path) -> None:
    rng = Rng(5)
    dim, n_heads, n_kv_heads, ffn, T = 64, 4, 2, 128, 11
    hd = dim // n_heads  # 16
    eps, theta = 1e-5, 10000.0
    x = rng.normal(T, dim)  # [T, dim]
    w = block_weights(rng, dim, n_heads, n_kv_heads, hd, ffn)
    pos = torch.arange(T)  # [T]
    inv_freq = inv_freq_base(theta, hd)  # [hd/2]
    out = llama_block(x, w, pos, n_heads, n_kv_heads, eps, inv_freq, "interleaved")  # [T, dim]

    # Cross-check with HF's LlamaDecoderLayer. HF rotates half-split pairs; the
    # interleaved block equals HF's with the rows of Wq / Wk permuted within
    # each head (q.k dot products are unchanged by a common permutation).
    cfg = LlamaConfig(hidden_size=dim, intermediate_size=ffn, num_attention_heads=n_heads,
                      num_key_value_heads=n_kv_heads, rms_norm_eps=eps, rope_theta=theta,
                      attn_implementation="eager")
    layer = modeling_llama.LlamaDecoderLayer(cfg, layer_idx=0).double().eval()
    perm = neox_perm(hd)  # [hd]
    rows_q = (torch.arange(n_heads)[:, None] * hd + perm[None, :]).reshape(-1)  # [H*hd]
    rows_k = (torch.arange(n_kv_heads)[:, None] * hd + perm[None, :]).reshape(-1)  # [KVH*hd]
    with torch.no_grad():
        layer.input_layernorm.weight.copy_(w["attn_norm"])
        layer.self_attn.q_proj.weight.copy_(w["wq"][rows_q])
        layer.self_attn.k_proj.weight.copy_(w["wk"][rows_k])
        layer.self_attn.v_proj.weight.copy_(w["wv"])
        layer.self_attn.o_proj.weight.copy_(w["wo"])
        layer.post_attention_layernorm.weight.copy_(w["ffn_norm"])
        layer.mlp.gate_proj.weight.copy_(w["w_gate"])
        layer.mlp.up_proj.weight.copy_(w["w_up"])
        layer.mlp.down_proj.weight.copy_(w["w_down"])
        mask = torch.full((T, T), torch.finfo(F64).min, dtype=F64).triu(1)[None, None]  # [1, 1, T, T]
        cos_sin = Float64Rotary(inv_freq)(x, pos[None])  # 2 x [1, T, hd]
        with hf_float64():
            hf_out = layer(x[None], attention_mask=mask, position_ids=pos[None],
                           position_embeddings=cos_sin)[0][0]  # [T, dim]
    err = assert_close("block vs LlamaDecoderLayer", hf_out, out, TOL_F64)

    entries = {"dim": dim, "n_heads": n_heads, "n_kv_heads": n_kv_heads, "ffn_dim": ffn, "eps": eps,
               "theta": theta, "x": x}
    entries.update(w)
    entries["out"] = out
    emit(out_dir, "block.bin", entries, f"HF LlamaDecoderLayer max diff {err:.1e}")


def gen_model(out_dir: Path, filename: str, seed: int, tied: bool, theta: float,
              llama3: dict | None) -> None:
    """HF LlamaForCausalLM golden; llama3 = Llama-3.1 rope scaling or None."""
    vocab, dim, ffn, n_layers, n_heads, n_kv_heads, T, eps = 256, 64, 172, 3, 4, 2, 70, 1e-5
    hd = dim // n_heads  # 16
    rope_scaling = None
    if llama3 is not None:
        rope_scaling = {"rope_type": "llama3", "factor": llama3["factor"],
                        "low_freq_factor": llama3["low_freq_factor"],
                        "high_freq_factor": llama3["high_freq_factor"],
                        "original_max_position_embeddings": llama3["original_context"]}
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=dim, intermediate_size=ffn, num_hidden_layers=n_layers,
                      num_attention_heads=n_heads, num_key_value_heads=n_kv_heads, hidden_act="silu",
                      max_position_embeddings=256, rms_norm_eps=eps, rope_theta=theta, rope_scaling=rope_scaling,
                      tie_word_embeddings=tied, attention_bias=False, mlp_bias=False,
                      attn_implementation="eager")
    torch.manual_seed(seed)  # HF's own init (all of it is overwritten below)
    model = LlamaForCausalLM(cfg).eval()
    assert model.config._attn_implementation == "eager"
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied

    # Re-initialise every parameter from our seeded generator, in file order.
    rng = Rng(seed)
    tokens = rng.ints(0, vocab, T)  # [T]
    tokens[0] = 1
    weights: dict = {"tok_embeddings": rng.normal(vocab, dim)}  # [vocab, dim], std 1
    layers = []
    for l in range(n_layers):
        lw = block_weights(rng, dim, n_heads, n_kv_heads, hd, ffn)
        layers.append(lw)
        weights.update({f"layers.{l}.{k}": v for k, v in lw.items()})
    weights["norm"] = rng.norm_weight(dim)  # [dim]
    if not tied:
        weights["output"] = rng.normal(vocab, dim, std=1.0 / math.sqrt(dim))  # [vocab, dim]

    hf_names = {"tok_embeddings": "model.embed_tokens.weight", "norm": "model.norm.weight",
                "output": "lm_head.weight"}
    per_layer = {"attn_norm": "input_layernorm", "wq": "self_attn.q_proj", "wk": "self_attn.k_proj",
                 "wv": "self_attn.v_proj", "wo": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
                 "w_gate": "mlp.gate_proj", "w_up": "mlp.up_proj", "w_down": "mlp.down_proj"}
    for l in range(n_layers):
        for k, m in per_layer.items():
            hf_names[f"layers.{l}.{k}"] = f"model.layers.{l}.{m}.weight"
    params = dict(model.named_parameters())  # tied lm_head is not listed separately
    assert set(params) == {hf_names[k] for k in weights}, "parameter set mismatch"
    with torch.no_grad():
        for k, v in weights.items():
            params[hf_names[k]].copy_(v.to(torch.float32))  # exact: v is float32-representable
    model = model.double()

    # HF's own RoPE frequencies (float32) vs the textbook ones.
    if llama3 is None:
        inv_freq = inv_freq_base(theta, hd)  # [hd/2]
    else:
        inv_freq = inv_freq_llama3(theta, hd, **llama3)  # [hd/2]
    assert model.model.rotary_emb.attention_scaling == 1.0
    inv_err = assert_close(f"{filename} inv_freq vs HF", model.model.rotary_emb.inv_freq, inv_freq,
                           TOL_HF_INV_FREQ, rel=True)

    with torch.no_grad():
        # Stock HF (float32 RMSNorm / softmax / RoPE table inside), for reference.
        logits_stock = model(tokens[None]).logits[0]  # [T, vocab]
        # Golden: HF with those three kept in float64.
        model.model.rotary_emb = Float64Rotary(inv_freq)
        with hf_float64():
            logits = model(tokens[None]).logits[0]  # [T, vocab]
    assert logits.dtype == F64

    # Textbook float64 forward, half-split ("neox") RoPE like HF.
    pos = torch.arange(T)  # [T]
    h = weights["tok_embeddings"][tokens]  # [T, dim]
    for lw in layers:
        h = llama_block(h, lw, pos, n_heads, n_kv_heads, eps, inv_freq, "neox")  # [T, dim]
    out_w = weights["tok_embeddings"] if tied else weights["output"]  # [vocab, dim]
    ref = rmsnorm(h, weights["norm"], eps) @ out_w.T  # [T, vocab]
    err = assert_close(f"{filename} textbook forward vs HF", ref, logits, TOL_F64)
    scale = float(logits.abs().max())
    stock_err = assert_close(f"{filename} stock (float32-internal) HF vs golden", logits_stock, logits,
                             1e-5 * max(1.0, scale))

    entries: dict = {"vocab_size": vocab, "dim": dim, "ffn_dim": ffn, "n_layers": n_layers, "n_heads": n_heads,
                     "n_kv_heads": n_kv_heads, "eps": eps, "theta": theta, "tied": int(tied)}
    if llama3 is not None:
        entries.update({f"rope.{k}": v for k, v in llama3.items()})
    entries["tokens"] = tokens
    entries.update(weights)
    entries["logits"] = logits
    emit(out_dir, filename, entries,
         f"HF {transformers.__version__} logits |max| {scale:.2f}; textbook max diff {err:.1e}; "
         f"stock-HF max diff {stock_err:.1e}; inv_freq rel diff {inv_err:.1e}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR, help="where to write (default tests/goldens)")
    args = ap.parse_args(argv)
    out_dir = args.out_dir.resolve()
    torch.manual_seed(0)

    gen_rmsnorm(out_dir)
    gen_rope(out_dir)
    gen_attention(out_dir)
    gen_swiglu(out_dir)
    gen_block(out_dir)
    gen_model(out_dir, "model.bin", seed=6, tied=False, theta=10000.0, llama3=None)
    gen_model(out_dir, "model_tied_llama3.bin", seed=7, tied=True, theta=500000.0,
              llama3={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_context": 32})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
