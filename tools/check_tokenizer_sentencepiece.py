#!/usr/bin/python3
"""Cross-checks hllm's SentencePiece tokenizer against Google's sentencepiece library.

Generates deterministic test strings (mixed scripts, whitespace runs, emoji, digits,
punctuation, invalid UTF-8), tokenizes each with Debian's python3-sentencepiece and the Llama 2
model (shared/tokenizers/llama2-tokenizer.model), and with hllm-tokenize on the same
vocabulary in GGUF form (shared/tokenizers/ggml-vocab-llama-spm.gguf), and compares the ids.
Prints "N passed, M failed" and exits 1 if anything failed, 77 (CTest's "skipped") if
sentencepiece or the shared folder is missing.

Invalid UTF-8: sentencepiece decodes its input first and turns every invalid byte into U+FFFD,
while llama.cpp (and therefore hllm) keeps the raw byte and emits its <0xNN> byte token. The
two are different by design, so for strings with invalid bytes we do not compare ids with
sentencepiece; we check instead that hllm tokenizes them without failing and that detokenizing
gives back the original bytes (the byte-fallback round trip). The round trip is compared with
U+2581 written as a space on both sides: like llama.cpp, hllm groups an invalid lead byte with
the bytes after it, so a following space (already escaped to U+2581) can end up in byte tokens
and decode as U+2581 instead of ' ', and an input U+2581 always decodes as ' ' in SentencePiece.

Usage: tools/check_tokenizer_sentencepiece.py --tokenize BUILD/examples/hllm-tokenize
           [--shared ../shared] [--count 1200] [--seed 1234] [--verbose]
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile

SKIP = 77

# Pieces the generator draws from; every script here is in the Llama 2 vocabulary either as
# tokens or as byte fallback.
WORDS = ["Hello", "world", "the", "llama", "tokenizer", "don't", "I'll", "you're", "C++20",
         "Führer", "naïve", "café", "Straße", "нещо", "Български", "Привет", "мир", "Ελληνικά",
         "我想在", "apple", "工作", "東京", "こんにちは", "カタカナ", "한국어", "안녕하세요",
         "ខលចេញ", "ពិសេស", "हिन्दी", "नमस्ते", "العربية", "مرحبا", "עברית", "ไทย", "Việt",
         "Cửa", "e\u0301", "ﬁ", "Ⅻ", "½", "x²", "3.14159", "1234567890", "0x1F", "@user",
         "#tag", "a_b", "foo.bar()", "<s>", "</s>", "<unk>", "<0x41>", "▁", "___", "...",
         "!!!", "??", "--", "==", "''", '""', "``", "(x)", "[y]", "{z}", "a/b", "\\n"]
EMOJI = ["🦙", "🚀", "😁", "😶‍🌫️", "✅", "👍🏽", "🇩🇪", "❤️", "🧑‍💻", "🤖"]
SPACES = [" ", "  ", "   ", "    ", "\t", "\n", "\n\n", " \n ", "\r\n", "\u00a0", "\u3000",
          "\u2009", " \t "]
INVALID = [b"\xff", b"\xfe", b"\x80", b"\xc3", b"\xe2\x96", b"\xf0\x9f\x98", b"\xc0\xaf",
           b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]


def generate(count, seed):
    """Deterministic list of (bytes, has_invalid) pairs."""
    rng = random.Random(seed)
    cases = []
    # A few fixed edge cases first.
    for text in ["", " ", "  ", "\n", "a", " a", "a ", "Hello world", " Hello world",
                 "Hello\n\nworld", "   leading", "trailing   ", "\t\ttabs", "🦙🦙🦙"]:
        cases.append((text.encode(), False))
    while len(cases) < count:
        parts = []
        invalid = False
        for _ in range(rng.randint(1, 8)):
            kind = rng.random()
            if kind < 0.5:
                parts.append(rng.choice(WORDS).encode())
            elif kind < 0.65:
                parts.append(rng.choice(EMOJI).encode())
            elif kind < 0.9:
                parts.append(rng.choice(SPACES).encode())
            elif kind < 0.95:
                parts.append(bytes([rng.randint(0x21, 0x7e)]) * rng.randint(1, 4))
            else:
                parts.append(rng.choice(INVALID))
                invalid = True
        cases.append((b"".join(parts), invalid))
    return cases


def run_tool(tool, model, data, extra):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(data)
        path = f.name
    try:
        result = subprocess.run([tool, "-m", model, "-f", path] + extra, capture_output=True,
                                timeout=60)
    finally:
        os.unlink(path)
    if result.returncode != 0:
        raise RuntimeError(result.stderr.decode(errors="replace").strip())
    return result.stdout


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenize", required=True, help="path of the hllm-tokenize program")
    parser.add_argument("--shared", default=os.path.join(here, "..", "..", "shared"))
    parser.add_argument("--count", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()

    try:
        import sentencepiece
    except ImportError:
        print("SKIP: python3-sentencepiece is not installed")
        return SKIP
    model = os.path.join(args.shared, "tokenizers", "llama2-tokenizer.model")
    gguf = os.path.join(args.shared, "tokenizers", "ggml-vocab-llama-spm.gguf")
    if not (os.path.exists(model) and os.path.exists(gguf)):
        print(f"SKIP: {args.shared}/tokenizers is absent")
        return SKIP

    sp = sentencepiece.SentencePieceProcessor(model_file=model)
    passed = failed = 0
    for data, invalid in generate(args.count, args.seed):
        try:
            got = [int(t) for t in run_tool(args.tokenize, gguf, data, ["--no-bos"]).split()]
            if invalid:
                ids_text = " ".join(map(str, got)).encode()
                back = run_tool(args.tokenize, gguf, ids_text, ["--detokenize"])
                escaped_space = "\u2581".encode()
                ok = back.replace(escaped_space, b" ") == data.replace(escaped_space, b" ")
                detail = f"round trip gave {back!r}"
            else:
                expected = sp.encode(data.decode("utf-8"))
                ok = got == expected
                detail = f"expected {expected}\n       got      {got}"
        except Exception as error:  # a crash or error exit of the tool counts as a failure
            ok = False
            detail = str(error)
        if ok:
            passed += 1
        else:
            failed += 1
            if args.verbose or failed <= 20:
                print(f"FAIL {data!r}\n       {detail}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
