#!/usr/bin/python3
"""Train the small bundled Llama model on the KJV Bible (CPU, fp32, one thread).

Run tools/train/prepare_data.py first (text, held-out split, tokenizer, token streams).

Model: a textbook Llama decoder written here in plain PyTorch:
    vocab 2048, dim 256, 6 layers, 8 query heads, 2 KV heads (grouped-query
    attention 4:1; query head h reads KV head h // 4), head_dim 32, SwiGLU FFN
    704, RMSNorm (eps 1e-5, pre-norm), RoPE theta 10000, context 256, untied
    output projection, no biases anywhere.

RoPE layout: INTERLEAVED. Within each head, dims (2i, 2i+1) form the pair that
is rotated by angle pos * theta^(-2i/head_dim). This is the layout GGUF llama
models use (llama.cpp's "normal" RoPE; convert_hf_to_gguf.py permutes HF's
half-split Wq/Wk rows into it), so the saved Wq/Wk rows need no permutation.

Weights are saved (float32, GGUF tensor names, nn.Linear [out, in] layout) in the
golden file format the C++ tests read ("HLLMGLD1", see write_golden()).

Training: AdamW (betas 0.9/0.95, weight decay 0.1 on matrices), gradient
clipping at 1.0, batches of random 256-token windows of the training-token
stream (BOS book EOS BOS book EOS ...). torch.set_num_threads(1) (and one
OpenBLAS thread): the machine is shared.

Learning rate: warmup-stable-decay. Linear warmup (--warmup steps) to --lr,
constant, then a cosine-shaped decay to --min-lr-ratio x lr from step
--decay-start to the last step --steps.

Time budget and reproducibility: the machine's speed (and other processes on
it) decide how many steps fit, so by default (--steps auto) the schedule is
planned from the clock: the decay starts once (1 - --decay-frac) of
--train-minutes has elapsed, and its length is what fits in the rest at the
step rate of the last 200 steps (evaluations included, 5% slack). The
resulting --steps N --decay-start S are logged; re-running with them (plus
--stop-at K if the hard stop below ended the run at step K) reproduces the run exactly (fixed seeds, one thread, deterministic data
order). Independently, a hard stop ends training when --train-minutes have
elapsed since the start (logged if it fires). Afterwards: final held-out/train
evaluation, samples (temperature 0.8), save.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import os

# glibc malloc: keep freed big buffers instead of mmap/munmap-ing them every step
# (much faster training steps here; numerics unaffected). Re-exec once with them set.
_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "4294967296",
               "MALLOC_TOP_PAD_": "268435456",
               # one thread: torch.set_num_threads(1) alone leaves OpenBLAS's own pool at nproc
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
if __name__ == "__main__" and any(os.environ.get(k) != v for k, v in _MALLOC_ENV.items()):
    os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **_MALLOC_ENV})

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
MAGIC = b"HLLMGLD1"


@dataclass
class Config:
    vocab_size: int = 2048
    dim: int = 256
    n_layers: int = 6
    n_heads: int = 8
    n_kv_heads: int = 2
    ffn_dim: int = 704
    context_length: int = 256
    eps: float = 1e-5
    theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg: Config, n_pos: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: [n_pos, head_dim/2]; column i belongs to the pair (2i, 2i+1)."""
    hd = cfg.head_dim
    inv_freq = cfg.theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)  # [hd/2]
    ang = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [T, hd/2]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved RoPE. x: [B, H, T, hd], cos/sin: [T, hd/2] -> [B, H, T, hd]."""
    a, b = x[..., 0::2], x[..., 1::2]  # [B, H, T, hd/2]
    out_a = a * cos - b * sin
    out_b = a * sin + b * cos
    return torch.stack((out_a, out_b), dim=-1).flatten(-2)  # re-interleave


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        c = self.cfg
        hd = c.head_dim
        q = self.wq(x).view(B, T, c.n_heads, hd).transpose(1, 2)  # [B, H, T, hd]
        k = self.wk(x).view(B, T, c.n_kv_heads, hd).transpose(1, 2)  # [B, KVH, T, hd]
        v = self.wv(x).view(B, T, c.n_kv_heads, hd).transpose(1, 2)  # [B, KVH, T, hd]
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        group = c.n_heads // c.n_kv_heads
        k = k.repeat_interleave(group, dim=1)  # [B, H, T, hd]: head h reads kv head h // group
        v = v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)  # [B, H, T, T]
        scores = scores.masked_fill(mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, T, hd]
        return self.wo(out.transpose(1, 2).reshape(B, T, c.n_heads * hd))


class FeedForward(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.w_gate = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_up = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w_down = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.eps)
        self.attn = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.eps)
        self.ffn = FeedForward(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask)
        return x + self.ffn(self.ffn_norm(x))


class Llama(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)  # untied
        cos, sin = rope_tables(cfg, cfg.context_length)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        # GPT-2 / Llama-style init: N(0, 0.02), residual-output projections scaled down.
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("wo.weight") or name.endswith("w_down.weight"):
                    std = 0.02 / math.sqrt(2 * cfg.n_layers)
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: [B, T] token ids (T <= context_length) -> logits [B, T, vocab]."""
        T = idx.shape[1]
        assert T <= self.cfg.context_length
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = hidden
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        x = self.tok_emb(idx)
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return self.output(self.norm(x))

    def gguf_tensors(self) -> dict[str, torch.Tensor]:
        """Weights under their GGUF names, nn.Linear [out, in] layout."""
        t = {"token_embd.weight": self.tok_emb.weight}
        for l, b in enumerate(self.blocks):
            t[f"blk.{l}.attn_norm.weight"] = b.attn_norm.weight
            t[f"blk.{l}.attn_q.weight"] = b.attn.wq.weight
            t[f"blk.{l}.attn_k.weight"] = b.attn.wk.weight
            t[f"blk.{l}.attn_v.weight"] = b.attn.wv.weight
            t[f"blk.{l}.attn_output.weight"] = b.attn.wo.weight
            t[f"blk.{l}.ffn_norm.weight"] = b.ffn_norm.weight
            t[f"blk.{l}.ffn_gate.weight"] = b.ffn.w_gate.weight
            t[f"blk.{l}.ffn_up.weight"] = b.ffn.w_up.weight
            t[f"blk.{l}.ffn_down.weight"] = b.ffn.w_down.weight
        t["output_norm.weight"] = self.norm.weight
        t["output.weight"] = self.output.weight
        return t


# --------------------------------------------------------------------------
# Golden-format writer
# --------------------------------------------------------------------------


def write_golden(path: Path, entries: dict) -> int:
    """Little-endian: "HLLMGLD1", u32 n; per entry u32 name_len, name, u32 ndim,
    ndim x u64 dims, float32 row-major values (ndim 0 = one scalar)."""
    chunks = [MAGIC, struct.pack("<I", len(entries))]
    for name, value in entries.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().double().numpy()
        arr64 = np.asarray(value, dtype=np.float64)
        assert np.all(np.isfinite(arr64)), name
        arr = arr64.astype("<f4")
        nb = name.encode("ascii")
        chunks += [struct.pack("<I", len(nb)), nb, struct.pack("<I", arr.ndim),
                   struct.pack(f"<{arr.ndim}Q", *arr.shape), np.ascontiguousarray(arr).tobytes()]
    data = b"".join(chunks)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)


def config_entries(cfg: Config) -> dict:
    return {k: float(v) for k, v in asdict(cfg).items()}


# --------------------------------------------------------------------------
# Evaluation and sampling
# --------------------------------------------------------------------------


def doc_spans(ids: np.ndarray, bos: int) -> list[tuple[int, int]]:
    starts = list(np.flatnonzero(ids == bos)) + [len(ids)]
    return [(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]


@torch.no_grad()
def eval_nll(model: Llama, ids: np.ndarray, bos: int, stride: int = 128) -> tuple[float, int]:
    """Sum of NLL (nats) and count over every token after each document's BOS (EOS included).

    Per document (BOS ... EOS), sliding windows of context_length with the given
    stride: every token is scored once, with >= context_length - stride tokens of
    context except in the first window of a document.
    """
    model.eval()
    ctx = model.cfg.context_length
    total, count = 0.0, 0
    for a, b in doc_spans(ids, bos):
        doc = torch.from_numpy(ids[a:b].astype(np.int64))
        n = doc.numel()
        scored = 1  # next position to score (position 0 = BOS is never a target)
        start = 0
        while scored < n:
            end = min(start + ctx + 1, n)  # window = doc[start:end] (inputs end-1 tokens)
            x = doc[start:end - 1][None]
            y = doc[start + 1:end]
            logp = F.log_softmax(model(x)[0].double(), dim=-1)  # [L, V]
            nll = -logp.gather(1, y[:, None])[:, 0]  # nll[j] is for target position start+1+j
            first = scored - (start + 1)
            total += float(nll[first:].sum())
            count += int(nll.numel() - first)
            scored = end
            if end == n:
                break
            start = end - 1 - (ctx - stride)  # next window overlaps: >= ctx-stride context
    model.train()
    return total, count


@torch.no_grad()
def generate(model: Llama, prompt: list[int], n_new: int, temperature: float, gen: torch.Generator,
             eos: int) -> list[int]:
    model.eval()
    ids = list(prompt)
    for _ in range(n_new):
        x = torch.tensor(ids[-model.cfg.context_length:])[None]
        logits = model(x)[0, -1].double()
        if temperature <= 0:
            nxt = int(torch.argmax(logits))
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = int(torch.multinomial(probs, 1, generator=gen))
        ids.append(nxt)
        if nxt == eos:
            break
    model.train()
    return ids


# --------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------


def lr_at(step: int, total: int | None, decay_start: int | None, peak: float, warmup: int,
          min_ratio: float) -> float:
    """Warmup-stable-decay; total/decay_start None = not yet planned (stable phase)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if decay_start is None or step < decay_start:
        return peak
    progress = min(1.0, (step - decay_start) / max(1, total - decay_start))
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


class Logger:
    def __init__(self, path: Path | None):
        self.f = open(path, "w", buffering=1) if path else None

    def __call__(self, *parts) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        if self.f:
            self.f.write(line + "\n")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/kjv-train"))
    ap.add_argument("--log", type=Path, default=ROOT / "tools" / "train" / "training_log.txt")
    ap.add_argument("--result", type=Path, default=ROOT / "tools" / "train" / "heldout_result.txt")
    ap.add_argument("--weights-out", type=Path, default=ROOT / "models" / "kjv-llama.weights.bin")
    ap.add_argument("--tokenizer", type=Path, default=ROOT / "models" / "kjv-tokenizer.model")
    ap.add_argument("--steps", default="auto", help="total optimizer steps, or 'auto' (see above)")
    ap.add_argument("--train-minutes", type=float, default=40.0, help="training time budget from start")
    ap.add_argument("--decay-start", default="auto", help="first step of the LR decay, or 'auto'")
    ap.add_argument("--stop-at", type=int, default=None,
                    help="end training after this step (reproduces a run that the time budget stopped early)")
    ap.add_argument("--decay-frac", type=float, default=0.3, help="auto: fraction of the time budget for the decay")
    ap.add_argument("--batch", type=int, default=8, help="256-token windows per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.02)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--ffn-dim", type=int, default=704)
    ap.add_argument("--bench", action="store_true", help="time steps for a few batch sizes and exit")
    ap.add_argument("--no-save", action="store_true", help="smoke runs: do not write weights/results")
    args = ap.parse_args(argv)
    t0 = time.time()
    budget_s = args.train_minutes * 60

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    work: Path = args.work_dir
    train_ids = np.load(work / "train_tokens.npy").astype(np.int64)
    held_ids = np.load(work / "heldout_tokens.npy").astype(np.int64)
    cfg = Config(ffn_dim=args.ffn_dim)
    BOS, EOS = 1, 2
    model = Llama(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    T = cfg.context_length

    def batch(bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
        starts = rng.integers(0, len(train_ids) - T - 1, size=bsz)
        w = torch.from_numpy(np.stack([train_ids[s:s + T + 1] for s in starts]))
        return w[:, :-1], w[:, 1:]

    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    if args.bench:
        for bsz in (4, 8, 16, 32):
            x, y = batch(bsz)
            times = []
            for _ in range(4):
                s = time.time()
                loss = F.cross_entropy(model(x).view(-1, cfg.vocab_size), y.reshape(-1))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                times.append(time.time() - s)
            dt = min(times[1:])
            print(f"batch {bsz:3d}: {dt:.3f} s/step  {bsz * T / dt:8.0f} tok/s", flush=True)
        s = time.time()
        eval_nll(model, held_ids, BOS)
        print(f"held-out eval: {time.time() - s:.1f} s", flush=True)
        return 0

    log = Logger(None if args.no_save else args.log)
    log(f"# KJV Llama training  started {time.strftime('%Y-%m-%d %H:%M:%S')}")
    log(f"# torch {torch.__version__}, threads {torch.get_num_threads()}")
    log("# config", json.dumps(asdict(cfg)), f"head_dim {cfg.head_dim}, RoPE layout interleaved")
    log(f"# params {n_params} ({n_params / 1e6:.3f} M)")
    log(f"# train tokens {len(train_ids)}, held-out tokens {len(held_ids)}")
    log("# args", json.dumps({k: str(v) for k, v in vars(args).items()}))

    def heldout() -> tuple[float, float]:
        s, n = eval_nll(model, held_ids, BOS)
        return s / n, time.time()

    ev_s = time.time()
    hl, _ = heldout()
    eval_cost = time.time() - ev_s
    log(f"eval step 0 heldout_loss {hl:.4f} heldout_ppl {math.exp(hl):.2f} (eval {eval_cost:.1f} s)")

    assert (args.steps == "auto") == (args.decay_start == "auto"), "give both --steps and --decay-start"
    total_steps = None if args.steps == "auto" else int(args.steps)
    decay_start = None if args.decay_start == "auto" else int(args.decay_start)
    step = 0
    step_times: list[float] = [time.time()]  # wall clock after each step (and at the start)
    stopped_by_time = False
    model.train()
    while True:
        if total_steps is not None and step >= total_steps:
            break
        if args.stop_at is not None and step >= args.stop_at:
            log(f"# stopping at step {step} (--stop-at)")
            break
        if time.time() - t0 >= budget_s:
            stopped_by_time = True
            log(f"# time budget reached at step {step} (planned {total_steps}; reproduce with "
                f"--steps {total_steps} --decay-start {decay_start} --stop-at {step})")
            break
        if total_steps is None and time.time() - t0 >= (1 - args.decay_frac) * budget_s:
            window = min(200, len(step_times) - 1)
            per_step = (step_times[-1] - step_times[-1 - window]) / window
            remaining = budget_s - (time.time() - t0)
            decay_start = step
            total_steps = step + int(0.95 * remaining / per_step)
            log(f"# plan: {per_step:.3f} s/step over the last {window} steps -> decay from step {decay_start} "
                f"to {total_steps} (reproduce with --steps {total_steps} --decay-start {decay_start})")
        lr = lr_at(step, total_steps, decay_start, args.lr, args.warmup, args.min_lr_ratio)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch(args.batch)
        loss = F.cross_entropy(model(x).view(-1, cfg.vocab_size), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        step_times.append(time.time())
        if step % args.log_every == 0 or step == 1:
            log(f"step {step} loss {loss.item():.4f} lr {lr:.2e} gnorm {float(gnorm):.2f} "
                f"elapsed {time.time() - t0:.1f}")
        if step % args.eval_every == 0:
            hl, _ = heldout()
            log(f"eval step {step} heldout_loss {hl:.4f} heldout_ppl {math.exp(hl):.2f} "
                f"elapsed {time.time() - t0:.1f}")
    train_end = time.time() - t0

    # ---- final evaluation ----
    per_book = {}
    import sentencepiece as spm  # noqa: E402
    sp = spm.SentencePieceProcessor(model_file=str(args.tokenizer))
    tot_s, tot_n = 0.0, 0
    for a, b in doc_spans(held_ids, BOS):
        s, n = eval_nll(model, held_ids[a:b], BOS)
        name = sp.decode(held_ids[a + 1:b].tolist()).split("\n")[0]
        per_book[name] = (s / n, n)
        tot_s += s
        tot_n += n
    held_loss = tot_s / tot_n
    # train loss on a fixed sample of 64 random training windows (same scoring as held-out)
    eval_rng = np.random.default_rng(999)
    ts, tn = 0.0, 0
    with torch.no_grad():
        model.eval()
        for s0 in eval_rng.integers(0, len(train_ids) - T - 1, size=64):
            w = torch.from_numpy(train_ids[s0:s0 + T + 1])[None]
            l = F.cross_entropy(model(w[:, :-1])[0].double(), w[0, 1:], reduction="sum")
            ts += float(l)
            tn += T
        model.train()
    train_loss = ts / tn
    held_chars = sum(len(sp.decode(held_ids[a + 1:b - 1].tolist())) for a, b in doc_spans(held_ids, BOS))
    bpc = tot_s / math.log(2) / held_chars
    log(f"# training finished: {step} steps in {train_end:.1f} s "
        f"({'stopped by time budget' if stopped_by_time else 'planned steps completed'})")
    log(f"final train_loss {train_loss:.4f} (64 random windows x 256 tokens) train_ppl {math.exp(train_loss):.2f}")
    log(f"final heldout_loss {held_loss:.4f} heldout_ppl {math.exp(held_loss):.2f} "
        f"({tot_n} tokens, {bpc:.3f} bits/char)")
    for name, (l, n) in per_book.items():
        log(f"  heldout {name}: loss {l:.4f} ppl {math.exp(l):.2f} ({n} tokens)")

    # ---- samples ----
    gen = torch.Generator().manual_seed(args.seed)
    prompts = ["In the beginning", "And Jesus said unto them,", "The LORD is my shepherd;",
               "And it came to pass", ""]
    log("# samples (temperature 0.8, seeded)")
    for p in prompts:
        ids = [BOS] + (sp.encode(p) if p else [])
        out = generate(model, ids, 120, 0.8, gen, EOS)
        log(f"--- prompt {p!r}:")
        log(sp.decode(out[1:]))
    g_out = generate(model, [BOS] + sp.encode("In the beginning"), 64, 0.0, gen, EOS)
    log("--- greedy from 'In the beginning':")
    log(sp.decode(g_out[1:]))

    if args.no_save:
        return 0
    # ---- save ----
    entries = config_entries(cfg)
    entries.update(model.gguf_tensors())
    size = write_golden(args.weights_out, entries)
    torch.save({"config": asdict(cfg), "model": model.state_dict(), "step": step, "args": vars(args)},
               work / "ckpt.pt")
    args.result.write_text(
        f"held-out books: Ruth, Jonah, Philemon, Jude (never trained on)\n"
        f"steps {step} (decay from step {decay_start}), batch {args.batch} x {T} tokens, "
        f"train time {train_end:.1f} s\n"
        f"heldout_tokens {tot_n}\n"
        f"heldout_loss {held_loss:.6f}\n"
        f"heldout_ppl {math.exp(held_loss):.4f}\n"
        f"heldout_bits_per_char {bpc:.4f}\n"
        f"train_loss {train_loss:.6f}\n"
        f"train_ppl {math.exp(train_loss):.4f}\n"
        + "".join(f"heldout_{n.replace(' ', '_')}_loss {l:.6f} ppl {math.exp(l):.4f} tokens {c}\n"
                  for n, (l, c) in per_book.items()))
    log(f"# wrote {args.weights_out} ({size} bytes), {work / 'ckpt.pt'}, {args.result}")
    log(f"# total wall time {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
