#!/usr/bin/python3
"""Checks hllm's logits on SmolLM2-135M-Instruct against an independent float64 evaluation.

Reads the GGUF file with a small reader of its own (no hllm code), dequantizes every tensor
(F32, F16, Q8_0, Q4_0, Q4_1) to float64 with numpy, and evaluates the textbook Llama forward
pass in float64: RMSNorm, interleaved ("normal", GGUF `llama` layout) RoPE, grouped-query causal
attention with scale 1/sqrt(head_dim), SwiGLU feed-forward, final norm, and the output
projection (token_embd when the file has no output.weight: tied embeddings).

It then runs hllm-logits on the same ids in prefill and in decode mode (the default fast path)
and prints, per mode: max abs error, rms error, the std of the reference logits, rms/std, and
top-1 agreement. Passes when, in both modes, rms error <= 6% of the logits' std and top-1
agreement >= 95%; exits 1 otherwise (2 on a usage or run error).

The quantized weights are reproduced exactly on both sides, so the difference measures hllm's
activation rounding and float32 arithmetic. hllm quantizes activations to 8 bits for weight
types with an integer kernel (Q8_0, Q4_0, Q4_1, the K-quants); SmolLM2's matrices are Q4_1, so
its projections take 8-bit activations, while its output projection (the tied Q8_0 embedding)
always takes float32 ones. On the 8-bit path this file's error is 3.7% (AVX-512), 4.0% (AVX2)
and 4.8% (scalar) of the std, top-1 44 to 46 of 46 (2026-12-01), about what 8-bit rounding
alone costs it in float64 (--per-layer, "all inputs, all layers": 5.3%): the 6% criterion. (It
was 3% while Q4_1 ran on float32 activations, an error at float32 rounding level.)

Usage: tools/check_smollm2.py [--model models/smollm2-135m-instruct.gguf]
           [--build build/release] [--tokens "1 2 3"] [-t N] [--keep DIR] [--per-layer]

--per-layer additionally prints, for the float64 reference, how much simulating hllm's 8-bit
activation rounding (per 32-block, scale max|x|/127, round to nearest even) changes the logits:
in every matmul input, per kind of input (q/k/v, attention output, gate/up, down) over all
layers, in the output projection only, and layer by layer: a diagnostic for where activation
quantization would hurt (about 35 s on 2 cores).
"""

import argparse
import os
import shlex
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ChatML question for the default ids (tokenized with hllm-tokenize --parse-special when the
# tool is there; otherwise FALLBACK_IDS, what hllm-tokenize gave for it, are used).
PROMPT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n<|im_start|>user\nWhy is the sky blue during the day but red at "
          "sunset? Explain briefly.<|im_end|>\n<|im_start|>assistant\n")

FALLBACK_IDS = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28,
                7018, 411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 4898, 314, 260, 6376, 4461,
                981, 260, 1194, 564, 2382, 418, 21822, 47, 16374, 13099, 30, 2, 198, 1, 520,
                9531, 198]

# ----------------------------------------------------------------------------- GGUF reader

GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
               10: "<Q", 11: "<q", 12: "<d"}
# ggml type -> (name, block elements, block bytes)
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
              8: ("Q8_0", 32, 34)}


class Reader:
    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def unpack(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v[0]

    def string(self):
        n = self.unpack("<Q")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, t):
        if t in GGUF_SCALAR:
            return self.unpack(GGUF_SCALAR[t])
        if t == 8:
            return self.string()
        if t == 9:
            et = self.unpack("<I")
            n = self.unpack("<Q")
            if et in GGUF_SCALAR:  # read numeric arrays in one go
                dt = np.dtype(GGUF_SCALAR[et])
                arr = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos)
                self.pos += n * dt.itemsize
                return arr
            return [self.value(et) for _ in range(n)]
        raise ValueError(f"unknown GGUF value type {t}")


def read_gguf(path):
    """Returns (metadata dict, {name: (ggml type, dims ne0.., raw uint8 view)})."""
    with open(path, "rb") as f:
        buf = memoryview(f.read())
    r = Reader(buf)
    if bytes(buf[:4]) != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    r.pos = 4
    version = r.unpack("<I")
    if version not in (2, 3):
        raise ValueError(f"{path}: GGUF version {version} not supported")
    n_tensors = r.unpack("<Q")
    n_kv = r.unpack("<Q")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        t = r.unpack("<I")
        meta[key] = r.value(t)
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.unpack("<I")
        dims = [r.unpack("<Q") for _ in range(nd)]
        t = r.unpack("<I")
        off = r.unpack("<Q")
        infos.append((name, dims, t, off))
    align = int(meta.get("general.alignment", 32))
    data_start = (r.pos + align - 1) // align * align
    raw = np.frombuffer(buf, dtype=np.uint8)
    tensors = {}
    for name, dims, t, off in infos:
        if t not in GGML_TYPES:
            raise ValueError(f"tensor {name}: ggml type {t} not supported by this checker")
        _, blk, bb = GGML_TYPES[t]
        n = int(np.prod(dims))
        nbytes = n // blk * bb
        start = data_start + off
        tensors[name] = (t, dims, raw[start:start + nbytes])
    return meta, tensors


def dequantize(t, dims, data):
    """float64 array of shape dims reversed (rows = dims[1..], columns = ne0)."""
    n = int(np.prod(dims))
    name = GGML_TYPES[t][0]
    if name == "F32":
        x = data.view("<f4").astype(np.float64)
    elif name == "F16":
        x = data.view("<f2").astype(np.float64)
    else:
        b = data.reshape(-1, GGML_TYPES[t][2])
        d = b[:, 0:2].copy().view("<f2").astype(np.float64)  # [nb, 1]
        if name == "Q8_0":
            q = b[:, 2:34].copy().view(np.int8).astype(np.float64)
            x = d * q
        else:
            qs = b[:, -16:]
            nib = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float64)  # j, j+16
            if name == "Q4_0":
                x = d * (nib - 8.0)
            else:  # Q4_1
                m = b[:, 2:4].copy().view("<f2").astype(np.float64)
                x = d * nib + m
    assert x.size == n
    return x.reshape(tuple(reversed([int(v) for v in dims])))


# ----------------------------------------------------------------------------- reference model

def quantize_act_8bit(x):
    """Simulated 8-bit activation rounding: per 32-element block, scale max|x|/127, round."""
    shp = x.shape
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    q = np.clip(np.rint(b * inv), -127, 127)
    return (q * d).reshape(shp)


class Reference:
    def __init__(self, meta, tensors):
        arch = meta["general.architecture"]
        g = lambda k, default=None: meta.get(f"{arch}.{k}", default)
        self.n_layer = int(g("block_count"))
        self.dim = int(g("embedding_length"))
        self.n_head = int(g("attention.head_count"))
        self.n_kv = int(g("attention.head_count_kv", self.n_head))
        self.ffn = int(g("feed_forward_length"))
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.base = float(g("rope.freq_base", 10000.0))
        self.head_dim = self.dim // self.n_head
        self.rot_dim = int(g("rope.dimension_count", self.head_dim))
        if g("rope.scaling.type") not in (None, "none"):
            raise ValueError("rope scaling not implemented in this checker")
        W = {name: dequantize(*v) for name, v in tensors.items()}
        self.W = W
        self.tok = W["token_embd.weight"]  # [vocab, dim]
        self.out = W.get("output.weight", self.tok)
        self.tied = "output.weight" not in W
        self.vocab = self.tok.shape[0]
        self.types = {name: GGML_TYPES[v[0]][0] for name, v in tensors.items()}

    def rmsnorm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):
        # x: [T, heads, head_dim]; pairs (2i, 2i+1) rotate with angle pos * base^(-2i/rot_dim).
        i = np.arange(self.rot_dim // 2, dtype=np.float64)
        theta = self.base ** (-2.0 * i / self.rot_dim)
        ang = pos[:, None].astype(np.float64) * theta[None, :]  # [T, rot/2]
        c = np.cos(ang)[:, None, :]
        s = np.sin(ang)[:, None, :]
        y = x.copy()
        a = x[..., 0:self.rot_dim:2]
        b = x[..., 1:self.rot_dim:2]
        y[..., 0:self.rot_dim:2] = a * c - b * s
        y[..., 1:self.rot_dim:2] = a * s + b * c
        return y

    def forward(self, ids, q8_layers=(), q8_inputs=("qkv", "wo", "gate_up", "down")):
        """float64 logits [T, vocab]. q8_layers: layer indices (or 'out') whose matmul inputs
        named in q8_inputs get the simulated 8-bit activation rounding (diagnostics only)."""
        W = self.W
        T = len(ids)
        pos = np.arange(T)
        hd, nh, nkv = self.head_dim, self.n_head, self.n_kv
        x = self.tok[np.asarray(ids)]  # [T, dim]
        mask = np.triu(np.full((T, T), -np.inf), k=1)
        for l in range(self.n_layer):
            p = f"blk.{l}."
            qa = lambda v, kind, l=l: (quantize_act_8bit(v) if l in q8_layers and kind in q8_inputs
                                       else v)
            h = self.rmsnorm(x, W[p + "attn_norm.weight"])
            hq = qa(h, "qkv")
            q = (hq @ W[p + "attn_q.weight"].T).reshape(T, nh, hd)
            k = (hq @ W[p + "attn_k.weight"].T).reshape(T, nkv, hd)
            v = (hq @ W[p + "attn_v.weight"].T).reshape(T, nkv, hd)
            q = self.rope(q, pos)
            k = self.rope(k, pos)
            rep = nh // nkv
            k = np.repeat(k, rep, axis=1)  # head h uses kv head h // rep
            v = np.repeat(v, rep, axis=1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
            s = s - s.max(axis=-1, keepdims=True)
            e = np.exp(s)
            a = e / e.sum(axis=-1, keepdims=True)
            o = np.einsum("hts,shd->thd", a, v).reshape(T, nh * hd)
            x = x + qa(o, "wo") @ W[p + "attn_output.weight"].T
            h = self.rmsnorm(x, W[p + "ffn_norm.weight"])
            hq = qa(h, "gate_up")
            gate = hq @ W[p + "ffn_gate.weight"].T
            up = hq @ W[p + "ffn_up.weight"].T
            act = gate / (1.0 + np.exp(-gate)) * up
            x = x + qa(act, "down") @ W[p + "ffn_down.weight"].T
        h = self.rmsnorm(x, W["output_norm.weight"])
        if "out" in q8_layers:
            h = quantize_act_8bit(h)
        return h @ self.out.T


# ----------------------------------------------------------------------------- comparison

def compare(ref, got):
    diff = got.astype(np.float64) - ref
    max_abs = float(np.abs(diff).max())
    rms = float(np.sqrt(np.mean(diff * diff)))
    std = float(ref.std())
    top1 = float(np.mean(ref.argmax(axis=1) == got.argmax(axis=1)))
    # per-row relative error, to spot positions that are worse than the rest
    row_rel = np.sqrt(np.mean(diff * diff, axis=1)) / ref.std(axis=1)
    return dict(max_abs=max_abs, rms=rms, std=std, rel=rms / std, top1=top1,
                worst_row=int(row_rel.argmax()), worst_row_rel=float(row_rel.max()))


def run(cmd, **kw):
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def main():
    sys.stdout.reconfigure(line_buffering=True)  # keep our lines in order with the tools' stderr
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models/smollm2-135m-instruct.gguf"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    ap.add_argument("--tokens", help="whitespace-separated ids (default: tokenized PROMPT)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--keep", help="directory to keep ids and logits in")
    ap.add_argument("--per-layer", action="store_true",
                    help="diagnose per-layer sensitivity to 8-bit activation rounding")
    ap.add_argument("--max-rel", type=float, default=0.06)
    ap.add_argument("--min-top1", type=float, default=0.95)
    args = ap.parse_args()

    logits_tool = os.path.join(args.build, "examples/hllm-logits")
    tokenize_tool = os.path.join(args.build, "examples/hllm-tokenize")
    for f in (args.model, logits_tool):
        if not os.path.exists(f):
            print(f"check_smollm2: missing {f}", file=sys.stderr)
            return 2

    work = args.keep or tempfile.mkdtemp(prefix="check_smollm2.")
    os.makedirs(work, exist_ok=True)

    t0 = time.time()
    meta, tensors = read_gguf(args.model)
    ref_model = Reference(meta, tensors)
    t_load = time.time() - t0
    types = sorted(set(ref_model.types.values()))
    print(f"model: {args.model}")
    print(f"  {ref_model.n_layer} layers, dim {ref_model.dim}, {ref_model.n_head} heads, "
          f"{ref_model.n_kv} kv heads (head_dim {ref_model.head_dim}), ffn {ref_model.ffn}, "
          f"vocab {ref_model.vocab}, rope base {ref_model.base:g}, rms eps {ref_model.eps:g}, "
          f"tied output: {ref_model.tied}")
    print("  tensor types: " + ", ".join(
        f"{t} x{sum(1 for v in ref_model.types.values() if v == t)}" for t in types)
          + f"  (token_embd {ref_model.types['token_embd.weight']})")
    print(f"  read + dequantized to float64 in {t_load:.1f} s")

    if args.tokens:
        ids = [int(v) for v in args.tokens.split()]
    elif not os.path.exists(tokenize_tool):
        print(f"{tokenize_tool} missing: using the built-in ids of the ChatML prompt")
        ids = FALLBACK_IDS
    else:
        prompt_path = os.path.join(work, "prompt.txt")
        with open(prompt_path, "w", encoding="utf-8") as f:
            f.write(PROMPT)
        out = run([tokenize_tool, "-m", args.model, "-f", prompt_path, "--parse-special"],
                  stdout=subprocess.PIPE, text=True).stdout
        ids = [int(v) for v in out.split()]
    ids_path = os.path.join(work, "ids.txt")
    with open(ids_path, "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    print(f"{len(ids)} ids: {' '.join(map(str, ids))}")
    print(f"python check: {' '.join(shlex.quote(a) for a in [sys.executable] + sys.argv)}")

    t0 = time.time()
    ref = ref_model.forward(ids)
    t_ref = time.time() - t0
    print(f"float64 reference forward: {t_ref:.1f} s")

    results = {}
    for mode in ("prefill", "decode"):
        out_path = os.path.join(work, f"logits.{mode}.f32")
        t0 = time.time()
        run([logits_tool, "-m", args.model, "--tokens-file", ids_path, "--mode", mode,
             "-t", str(args.threads), "-o", out_path])
        t_run = time.time() - t0
        got = np.fromfile(out_path, dtype="<f4")
        if got.size != ref.size:
            print(f"check_smollm2: {out_path} has {got.size} floats, expected {ref.size}",
                  file=sys.stderr)
            return 2
        results[mode] = compare(ref, got.reshape(ref.shape))
        results[mode]["time"] = t_run
    pd = compare(np.fromfile(os.path.join(work, "logits.prefill.f32"), "<f4")
                 .reshape(ref.shape).astype(np.float64),
                 np.fromfile(os.path.join(work, "logits.decode.f32"), "<f4").reshape(ref.shape))

    print()
    print(f"{'mode':8} {'max abs':>10} {'rms err':>10} {'std':>8} {'rms/std':>8} {'top-1':>7} "
          f"{'worst pos, rms/std':>18} {'time':>5}")
    ok = True
    for mode, r in results.items():
        good = r["rel"] <= args.max_rel and r["top1"] >= args.min_top1
        ok &= good
        print(f"{mode:8} {r['max_abs']:10.3e} {r['rms']:10.3e} {r['std']:8.4f} "
              f"{r['rel']:8.2e} {100 * r['top1']:6.1f}% "
              f"{r['worst_row']:>4} {r['worst_row_rel']:8.2e} {r['time']:5.1f}s  "
              f"{'ok' if good else 'FAIL'}")
    print(f"prefill vs decode: max abs {pd['max_abs']:.3e}, rms {pd['rms']:.3e} "
          f"({pd['rel']:.2e} of std), top-1 agreement {100 * pd['top1']:.1f}%")
    if max(r["rel"] for r in results.values()) < 1e-5:
        print("note: the error is at float32 rounding level, so no 8-bit activation rounding "
              "happened:\n      hllm took float32 activations for these weight types "
              f"({', '.join(t for t in types if t != 'F32')})")
    print(f"criteria: rms error <= {100 * args.max_rel:g}% of std, "
          f"top-1 agreement >= {100 * args.min_top1:g}%")

    if args.per_layer:
        # Which layers' activation rounding moves the logits most (in the float64 model)?
        print("\nsimulated 8-bit activation rounding, float64 reference (rms err / std, top-1):")

        def show(label, r):
            print(f"  {label:33}{100 * r['rel']:7.3f}%  {100 * r['top1']:5.1f}%")

        full = compare(ref, ref_model.forward(ids, q8_layers=set(range(ref_model.n_layer))))
        show("all inputs, all layers:", full)
        every = set(range(ref_model.n_layer))
        for kind in ("qkv", "wo", "gate_up", "down"):
            r = compare(ref, ref_model.forward(ids, q8_layers=every, q8_inputs=(kind,)))
            show(kind + " inputs only, all layers:", r)
        outq = compare(ref, ref_model.forward(ids, q8_layers={"out"}))
        show("output projection only:", outq)
        for l in range(ref_model.n_layer):
            r = compare(ref, ref_model.forward(ids, q8_layers={l}))
            show(f"all inputs, layer {l} only:", r)

    print("PASS" if ok else "FAIL")
    if not args.keep:
        for f in os.listdir(work):
            os.remove(os.path.join(work, f))
        os.rmdir(work)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as e:
        print(f"check_smollm2: command failed with status {e.returncode}", file=sys.stderr)
        sys.exit(2)
