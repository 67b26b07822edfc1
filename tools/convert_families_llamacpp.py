#!/usr/bin/env python3
"""Converts the family checkpoints of tests/goldens/families/ with llama.cpp's own converter.

    .venv-tools/bin/python tools/convert_families_llamacpp.py LLAMA_CPP_DIR [FAMILY...]

LLAMA_CPP_DIR is a llama.cpp source snapshot outside this repository (for instance the
vendor/llama.cpp of the llama-cpp-python sdist: `pip download --no-deps --no-binary :all:
llama-cpp-python`). For each family directory holding config.json and model.safetensors (as
tools/gen_family_goldens.py wrote them) this runs that snapshot's convert_hf_to_gguf.py
--outtype f32 and writes tests/goldens/families/<family>/llamacpp-f32.gguf, which
tests/test_families.cpp loads: proof that hllm reads the files llama.cpp's converter writes
(its metadata keys, tensor names and q/k row order), not only its own writer's.

Debian's torch (1.13) predates the float8 dtypes the converter names in a dtype table at import;
they are stood in by placeholder objects before it runs (the checkpoints are float32, so no
float8 path is taken). Nothing of the converter is changed.

The converter needs a tokenizer beside the checkpoint. The checkpoints are random and have
none, so a 64-piece SentencePiece BPE model is trained here (deterministically, one thread)
on a fixed text and put beside the copy; llama.cpp pads the vocabulary to config.json's
vocab_size. The tests only run token ids, so the pieces do not matter.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import sentencepiece as spm

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ROOT / "tests" / "goldens" / "families"
TEXT = ("the quick brown fox jumps over the lazy dog while a small model reads every tensor "
        "name and key the converter writes into its file, one layer after another\n") * 20


def train_tokenizer(out: Path) -> None:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT.splitlines()), model_writer=model,
                                   vocab_size=64, model_type="bpe", num_threads=1,
                                   character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0,
                                   minloglevel=2)
    out.write_bytes(model.getvalue())


# Runs the converter (argv[1], its arguments after it) with torch's missing dtypes stood in,
# and the vocabulary of classes that read only a byte-level BPE tokenizer (TextModel's default
# set_vocab: Qwen2-MoE; DeepseekV2Model's) taken from the SentencePiece model first, as Qwen2Model's own set_vocab
# does: a tiny BPE tokenizer trained here would not pass the converter's check of known
# pre-tokenizers. Only the vocabulary comes another way; metadata and tensors are the
# converter's own.
RUN_CONVERTER = """
import runpy, sys, torch
for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16",
             "uint32", "uint64"):
    if not hasattr(torch, name):
        setattr(torch, name, type(name, (), {})())
import conversion.base as base
def set_vocab(self):
    try:
        self._set_vocab_sentencepiece()
    except FileNotFoundError:
        self._set_vocab_gpt2()
base.TextModel.set_vocab = set_vocab
import conversion.deepseek as deepseek  # its own set_vocab reads only byte-level BPE too
deepseek.DeepseekV2Model.set_vocab = set_vocab
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def main(argv: list[str]) -> int:
    if len(argv) < 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    llama_cpp = Path(argv[0]).resolve()
    only = set(argv[1:])  # the families to convert; empty: all
    converter = llama_cpp / "convert_hf_to_gguf.py"
    if not converter.is_file():
        print(f"no convert_hf_to_gguf.py in {llama_cpp}", file=sys.stderr)
        return 2
    env = {"PYTHONPATH": f"{llama_cpp / 'gguf-py'}:{llama_cpp}", "PATH": "/usr/bin:/bin"}
    for family in sorted(p for p in FAMILIES.iterdir()
                         if (p / "config.json").is_file() and (not only or p.name in only)):
        out = family / "llamacpp-f32.gguf"
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = Path(tmp) / family.name
            checkpoint.mkdir()
            for name in ("config.json", "model.safetensors"):
                shutil.copy(family / name, checkpoint / name)
            train_tokenizer(checkpoint / "tokenizer.model")
            subprocess.run([sys.executable, "-c", RUN_CONVERTER, str(converter), str(checkpoint), "--outtype", "f32",
                            "--outfile", str(out)], check=True, env=env, stdout=subprocess.DEVNULL)
        print(f"{out.relative_to(ROOT)}: {out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
