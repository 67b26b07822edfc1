#!/usr/bin/env bash
# Writes the fuzzers' seed corpora under tests/fuzz/corpus/ (committed; rerun to regenerate).
# Valid small inputs made by our own writer and test files, plus the header of a shared
# fixture (when ../shared is present). Needs the release build's hllm-convert.
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=tests/fuzz/corpus
rm -rf "$corpus" && mkdir -p "$corpus"/{fuzz_gguf,fuzz_safetensors,fuzz_llama2c,fuzz_tokenizer,fuzz_chat_template,fuzz_kv_state}
formats=tests/goldens/formats

# GGUF: a tiny model written by our writer (Q4_0 keeps it small), the metadata of the bundled
# model (header, tokenizer keys and tensor index, no tensor data), and the first 4 KiB of a
# llama.cpp-written fixture.
build/release/examples/hllm-convert -i $formats/llama2c-v1.bin --type q4_0 \
  -o "$corpus/fuzz_gguf/tiny-q4_0.gguf" >/dev/null
head -c 49088 models/kjv-llama.gguf > "$corpus/fuzz_gguf/bundled-metadata.gguf"
if [ -f ../shared/fixtures/fx-gqa-q4_k_m.gguf ]; then
  head -c 4096 ../shared/fixtures/fx-gqa-q4_k_m.gguf > "$corpus/fuzz_gguf/fixture-header.gguf"
fi

# safetensors: two small tensors, written by hand to the format (8-byte length, JSON, data).
/usr/bin/python3 - "$corpus/fuzz_safetensors/small.safetensors" <<'PY'
import json, struct, sys
header = {"__metadata__": {"format": "pt"},
          "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
          "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}}
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)) + text + bytes(range(32)))
PY

# llama2.c: first byte 0 = checkpoint, 1 = tokenizer.bin (see fuzz_llama2c.cpp).
{ printf '\0'; cat $formats/llama2c-v1.bin; } > "$corpus/fuzz_llama2c/v1.bin"
{ printf '\0'; head -c 4096 $formats/llama2c-v0.bin; } > "$corpus/fuzz_llama2c/v0-head.bin"
{ printf '\1'; cat $formats/tokenizer.bin; } > "$corpus/fuzz_llama2c/tokenizer.bin"

# Tokenizers: first byte picks vocabulary and operation (see fuzz_tokenizer.cpp).
printf '\0In the beginning God created the heaven and the earth.' > "$corpus/fuzz_tokenizer/spm-text"
printf '\1Hello  world!\n\t<s>caf\xc3\xa9 \xf0\x9f\x98\x80 \xff\xfe 123' > "$corpus/fuzz_tokenizer/bpe-text"
printf '\4<s>[INST] special </s> tokens' > "$corpus/fuzz_tokenizer/parse-special"
printf '\x08\x01\x00\x00\x00\x10\x00\x00\x00\xff\x00\x00\x00' > "$corpus/fuzz_tokenizer/ids"
printf '\x0c\x01\x00\x00\x00\xff\xff\xff\x7f' > "$corpus/fuzz_tokenizer/ids-out-of-range"

# Chat templates: real-looking markers of each family, and a conversation split at NULs.
printf '{%% for m in messages %%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%% endfor %%}' \
  > "$corpus/fuzz_chat_template/chatml"
printf "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n{{ content }}<|eot_id|>" \
  > "$corpus/fuzz_chat_template/llama3"
printf '[INST] <<SYS>>\n{{ system }}\n<</SYS>>\n\n{{ user }} [/INST]' > "$corpus/fuzz_chat_template/llama2"
printf '<|user|>\n{{ m }}</s>\n<|assistant|>\n' > "$corpus/fuzz_chat_template/zephyr"
printf '\1You are kind.\0Hi!\0Hello.\0How are you?' > "$corpus/fuzz_chat_template/conversation"
du -sh "$corpus"

# KV state files: a valid 20-token file per element type, for fuzz_kv_state's pool.
g++ -std=c++20 -O1 -Iinclude -Itests/fuzz tests/fuzz/write_kv_state_seeds.cpp -pthread \
  -o build/write_kv_state_seeds
build/write_kv_state_seeds "$corpus/fuzz_kv_state"
