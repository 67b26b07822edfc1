#!/usr/bin/python3
"""Text, held-out split and tokenizer for the bundled KJV model.

Source: Debian's `bible-kjv` package (King James Version, public domain),
`bible "Gen1:1-Rev22:21"`. That prints, per chapter, a heading line
"Book N", a blank line, then the verses as "  V text" with the text wrapped
at ~80 columns. This script turns it into natural text without references:

    Genesis                        <- book name, once, at the start of a book
    <blank line>
    In the beginning God ...       <- one verse per line (wrapping undone)
    And the earth was ...
    <blank line>                   <- chapters are separated by a blank line
    And the heavens and the earth were finished, ...

Each book is one document. Held-out books (never trained on, and not seen by
the tokenizer trainer): Ruth (OT narrative), Jonah (OT prophet narrative),
Philemon (Pauline letter), Jude (general epistle) - 183 verses, ~0.6% of the
text, one from each broad genre that is short enough to spare.

Tokenizer: SentencePiece BPE, vocab 2048, byte fallback, trained on the
training books only, with the Llama (1/2) tokenizer settings: identity
normalization, add_dummy_prefix, no whitespace collapsing, split digits,
unk=0 bos=1 eos=2, no pad. Whole documents are encoded as one string, so a
newline becomes the byte token <0x0A> (as in Llama) and the word after it has
no leading "\u2581" (also as in Llama / llama.cpp for text containing newlines).

Outputs (work dir, default /tmp/kjv-train):
    kjv_train.txt, kjv_heldout.txt     the texts (documents separated by a blank line... see below)
    train_tokens.npy, heldout_tokens.npy   uint16 streams: BOS doc EOS BOS doc EOS ...
    heldout_docs.json                  per held-out book: name and token span in the stream
    tokenizer.model / .vocab           SentencePiece model, also copied to models/kjv-tokenizer.model

Deterministic: same `bible-kjv` text -> same files (SentencePiece BPE
training uses every sentence, no sampling; one thread).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import sentencepiece as spm

ROOT = Path(__file__).resolve().parents[2]
HELDOUT_BOOKS = ["Ruth", "Jonah", "Philemon", "Jude"]
VOCAB_SIZE = 2048

BOOKS = [
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
    "1 Samuel", "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra",
    "Nehemiah", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
    "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
    "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah",
    "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
    "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians", "1 Thessalonians",
    "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews", "James",
    "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude", "Revelation",
]
HEADING = re.compile(r"^(%s) (\d+)$" % "|".join(re.escape(b) for b in BOOKS))
VERSE = re.compile(r"^\s+(\d+) (.*)$")


def read_bible() -> str:
    exe = shutil.which("bible")
    if exe is None:
        sys.exit("the `bible` program is missing: apt-get install -y bible-kjv")
    return subprocess.run([exe, "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True).stdout


def parse(raw: str) -> list[tuple[str, list[list[str]]]]:
    """raw `bible` output -> [(book, [chapter -> [verse text]])] in canonical order."""
    books: list[tuple[str, list[list[str]]]] = []
    verse: list[str] | None = None  # words of the verse being read
    expect_verse = 0
    for line in raw.split("\n"):
        m = HEADING.match(line)
        if m:
            book, chap = m.group(1), int(m.group(2))
            if not books or books[-1][0] != book:
                assert chap == 1, line
                books.append((book, []))
            assert chap == len(books[-1][1]) + 1, line
            books[-1][1].append([])
            verse, expect_verse = None, 1
            continue
        if not line.strip():
            continue
        m = VERSE.match(line)
        if m and int(m.group(1)) == expect_verse:
            verse = [m.group(2).strip()]
            books[-1][1][-1].append(verse)  # type: ignore[arg-type]
            expect_verse += 1
            continue
        assert verse is not None and not line.startswith(" "), f"unexpected line: {line!r}"
        verse.append(line.strip())  # wrapped continuation
    out = []
    for book, chapters in books:
        out.append((book, [[" ".join(v) for v in ch] for ch in chapters]))  # type: ignore[misc]
    return out


def book_text(book: str, chapters: list[list[str]]) -> str:
    return book + "\n\n" + "\n\n".join("\n".join(ch) for ch in chapters) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/kjv-train"))
    ap.add_argument("--tokenizer-out", type=Path, default=ROOT / "models" / "kjv-tokenizer.model")
    args = ap.parse_args(argv)
    work: Path = args.work_dir
    work.mkdir(parents=True, exist_ok=True)

    raw = read_bible()
    books = parse(raw)
    assert [b for b, _ in books] == BOOKS, "book order"
    n_verses = sum(len(ch) for _, chs in books for ch in chs)
    assert n_verses == 31102, n_verses
    assert all(b in BOOKS for b in HELDOUT_BOOKS)

    train_docs = [(b, book_text(b, chs)) for b, chs in books if b not in HELDOUT_BOOKS]
    held_docs = [(b, book_text(b, chs)) for b, chs in books if b in HELDOUT_BOOKS]
    # Files: documents joined by one extra blank line (for reading; the token streams
    # mark document boundaries with BOS/EOS instead).
    (work / "kjv_train.txt").write_text("\n".join(t for _, t in train_docs))
    (work / "kjv_heldout.txt").write_text("\n".join(t for _, t in held_docs))

    # Tokenizer trainer input: one line per verse / heading (blank lines dropped).
    sp_input = work / "sp_input.txt"
    sp_input.write_text("".join(line + "\n" for _, t in train_docs for line in t.split("\n") if line))
    spm.SentencePieceTrainer.train(
        input=str(sp_input), model_prefix=str(work / "tokenizer"), model_type="bpe",
        vocab_size=VOCAB_SIZE, character_coverage=1.0, byte_fallback=True,
        normalization_rule_name="identity", add_dummy_prefix=True, remove_extra_whitespaces=False,
        split_digits=True, split_by_unicode_script=True, split_by_number=True,
        split_by_whitespace=True, allow_whitespace_only_pieces=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        max_sentence_length=16384, num_threads=1, input_sentence_size=0,
        shuffle_input_sentence=False, minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_file=str(work / "tokenizer.model"))
    assert sp.vocab_size() == VOCAB_SIZE and sp.unk_id() == 0 and sp.bos_id() == 1 and sp.eos_id() == 2
    args.tokenizer_out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(work / "tokenizer.model", args.tokenizer_out)

    def stream(docs):
        ids: list[int] = []
        spans = []
        for name, text in docs:
            toks = sp.encode(text)
            assert sp.decode(toks) == text, f"round trip failed for {name}"
            spans.append({"book": name, "start": len(ids), "length": len(toks) + 2})
            ids += [sp.bos_id()] + toks + [sp.eos_id()]
        return np.asarray(ids, dtype=np.uint16), spans

    train_ids, _ = stream(train_docs)
    held_ids, held_spans = stream(held_docs)
    np.save(work / "train_tokens.npy", train_ids)
    np.save(work / "heldout_tokens.npy", held_ids)
    (work / "heldout_docs.json").write_text(json.dumps(held_spans, indent=1) + "\n")

    n_train_chars = sum(len(t) for _, t in train_docs)
    n_held_chars = sum(len(t) for _, t in held_docs)
    n_bytefb = int(np.sum((train_ids >= 3) & (train_ids < 3 + 256)))
    info = {
        "bible_output_sha256": hashlib.sha256(raw.encode()).hexdigest(),
        "tokenizer_sha256": hashlib.sha256(args.tokenizer_out.read_bytes()).hexdigest(),
        "heldout_books": HELDOUT_BOOKS,
        "verses": n_verses,
        "train_chars": n_train_chars, "heldout_chars": n_held_chars,
        "train_tokens": int(train_ids.size), "heldout_tokens": int(held_ids.size),
        "train_chars_per_token": n_train_chars / train_ids.size,
        "train_byte_fallback_tokens": n_bytefb,
    }
    (work / "data_info.json").write_text(json.dumps(info, indent=1) + "\n")
    print(json.dumps(info, indent=1))
    print("sample encoding:", [sp.id_to_piece(i) for i in sp.encode("In the beginning God created the heaven and the earth.\nAnd")])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
