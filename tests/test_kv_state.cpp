// KV state files (io/kv_state_file.hpp): XXH64 against the reference vectors; the model
// fingerprint follows exactly the config fields that shape keys and values; a prompt computed
// into one pool, saved and loaded into another, gives bit-identical logits for every KV element
// type, ending mid-block or on a block boundary, and its loaded blocks serve as a cached prefix;
// every corruption, truncation and mismatch is an hllm::Error naming the file, the field and the
// offset, with the pool untouched; a pool too small gives capacity and keeps every block free.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "batch_entry.hpp"
#include "hllm/io/kv_state_file.hpp"
#include "hllm/model/batch.hpp"
#include "test_util.hpp"
#include "typed_weights.hpp"

namespace {

namespace fs = std::filesystem;
namespace format = hllm::kv_state_format;
using hllm::AnyPagedKVStorage;
using hllm::ErrorKind;
using hllm::KVBlockAllocator;
using hllm::KVBlockTable;
using hllm::KVStateFile;
using hllm::KVType;
using hllm::test::expect_error;
using hllm::test::run_entry;

constexpr std::size_t kBlock = hllm::kDefaultBlockTokens;

hllm::ModelConfig small_config() { return hllm::test::two_layer_gqa_config(); }

// Every KVType (kKVTypes lists them all, so a new type joins these tests).
std::vector<KVType> all_kv_types() {
  return {std::begin(hllm::kKVTypes), std::end(hllm::kKVTypes)};
}

AnyPagedKVStorage pool(KVType type, std::size_t n_blocks, std::size_t block_tokens = kBlock,
                       std::size_t n_layers = 2) {
  return AnyPagedKVStorage(type, n_blocks, block_tokens, n_layers, 2, 32);
}

// A fresh temporary directory per test (test_util.hpp).
struct TempDir : hllm::test::TempDir {
  TempDir() : hllm::test::TempDir("hllm_kv_state_") {}
};

std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

void write_bytes(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

void put(std::vector<std::byte>& bytes, std::uint64_t at, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) bytes[at + i] = static_cast<std::byte>(v >> (8 * i));
}

// Recomputes both checksums after an edit, as a forger (or a buggy writer) would: the checks of
// what the fields say must hold on their own.
void reseal(std::vector<std::byte>& bytes) {
  put(bytes, format::kHeaderChecksumAt,
      hllm::xxh64(std::span(bytes).first(format::kHeaderChecksumAt)), 8);
  put(bytes, bytes.size() - 8, hllm::xxh64(std::span(bytes).first(bytes.size() - 8)), 8);
}

// --- XXH64 -----------------------------------------------------------------------------------

std::span<const std::byte> text_bytes(const char* text) {
  return std::as_bytes(std::span(text, std::strlen(text)));
}

// The reference implementation's published values (xxhash's sanity check), one call and streamed
// in pieces of every size.
TEST(Xxh64, MatchesTheReferenceVectors) {
  EXPECT_EQ(hllm::xxh64({}), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(hllm::xxh64({}, 2654435761U), 0xAC75FDA2929B17EFULL);
  EXPECT_EQ(hllm::xxh64(text_bytes("a")), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(hllm::xxh64(text_bytes("abc")), 0x44BC2CF5AD770999ULL);
  EXPECT_EQ(hllm::xxh64(text_bytes("Nobody inspects the spammish repetition")),
            0xFBCEA83C8A378BF1ULL);
  std::vector<std::byte> sanity(101);
  std::uint32_t gen = 2654435761U;
  for (std::byte& b : sanity) {
    b = static_cast<std::byte>(gen >> 24);
    gen *= gen;
  }
  const std::span<const std::byte> s(sanity);
  EXPECT_EQ(hllm::xxh64(s.first(1)), 0x4FCE394CC88952D8ULL);
  EXPECT_EQ(hllm::xxh64(s.first(1), 2654435761U), 0x739840CB819FA723ULL);
  EXPECT_EQ(hllm::xxh64(s.first(14)), 0xCFFA8DB881BC3A3DULL);
  EXPECT_EQ(hllm::xxh64(s.first(14), 2654435761U), 0x5B9611585EFCC9CBULL);
  EXPECT_EQ(hllm::xxh64(s), 0x0EAB543384F878ADULL);
  EXPECT_EQ(hllm::xxh64(s, 2654435761U), 0xCAA65939306F1E21ULL);
  for (std::size_t piece = 1; piece <= 40; ++piece) {
    hllm::Xxh64 h(2654435761U);
    for (std::size_t at = 0; at < s.size(); at += piece)
      h.update(s.subspan(at, std::min(piece, s.size() - at)));
    EXPECT_EQ(h.digest(), 0xCAA65939306F1E21ULL) << "pieces of " << piece;
  }
}

// --- the model's identity --------------------------------------------------------------------

TEST(KVStateIdentity, FingerprintFollowsWhatShapesKeysAndValues) {
  const hllm::ModelConfig base = small_config();
  const std::uint64_t fp = hllm::model_fingerprint(base);
  EXPECT_EQ(fp, hllm::model_fingerprint(small_config()));
  using Edit = void (*)(hllm::ModelConfig&);
  const std::pair<const char*, Edit> changes[] = {
      {"vocab_size", [](hllm::ModelConfig& c) { c.vocab_size = 301; }},
      {"dim", [](hllm::ModelConfig& c) { c.dim = 512; }},
      {"n_layers", [](hllm::ModelConfig& c) { c.n_layers = 3; }},
      {"n_heads", [](hllm::ModelConfig& c) { c.n_heads = 4; }},
      {"n_kv_heads", [](hllm::ModelConfig& c) { c.n_kv_heads = 4; }},
      {"head_dim", [](hllm::ModelConfig& c) { c.head_dim = 64; }},
      {"ffn_dim", [](hllm::ModelConfig& c) { c.ffn_dim = 768; }},
      {"rms_eps", [](hllm::ModelConfig& c) { c.rms_eps = 1e-6f; }},
      {"sliding_window", [](hllm::ModelConfig& c) { c.sliding_window = 64; }},
      {"rope.layout", [](hllm::ModelConfig& c) { c.rope.layout = hllm::RopeLayout::neox; }},
      {"rope.theta", [](hllm::ModelConfig& c) { c.rope.theta = 500000.0f; }},
      {"rope.rot_dims", [](hllm::ModelConfig& c) { c.rope.rot_dims = 16; }},
      {"rope.scaling.type",
       [](hllm::ModelConfig& c) { c.rope.scaling.type = hllm::RopeScalingType::linear; }},
      {"rope.scaling.factor", [](hllm::ModelConfig& c) { c.rope.scaling.factor = 2.0f; }},
      {"rope.scaling.original_context",
       [](hllm::ModelConfig& c) { c.rope.scaling.original_context = 128; }},
      {"rope.freq_factors", [](hllm::ModelConfig& c) { c.rope.freq_factors.assign(16, 1.0f); }},
      {"qkv_bias", [](hllm::ModelConfig& c) { c.qkv_bias = true; }},
      {"qk_norm", [](hllm::ModelConfig& c) { c.qk_norm = hllm::QkNorm::per_head; }},
      {"qk_norm whole", [](hllm::ModelConfig& c) { c.qk_norm = hllm::QkNorm::whole; }},
      {"sandwich", [](hllm::ModelConfig& c) { c.layout = hllm::BlockLayout::sandwich; }},
      {"post_norm", [](hllm::ModelConfig& c) { c.layout = hllm::BlockLayout::post_norm; }},
      {"parallel", [](hllm::ModelConfig& c) { c.layout = hllm::BlockLayout::parallel; }},
      {"norm", [](hllm::ModelConfig& c) { c.norm = hllm::NormKind::layer; }},
      {"gated_ffn",
       [](hllm::ModelConfig& c) {
         c.gated_ffn = false;
         c.ffn_activation = hllm::GateActivation::gelu;
       }},
      {"ffn_activation",
       [](hllm::ModelConfig& c) { c.ffn_activation = hllm::GateActivation::gelu_tanh; }},
      {"scale_embeddings", [](hllm::ModelConfig& c) { c.scale_embeddings = true; }},
      {"attention_scale", [](hllm::ModelConfig& c) { c.attention_scale = 0.1f; }},
      {"attn_softcap", [](hllm::ModelConfig& c) { c.attn_softcap = 50.0f; }},
      {"sliding_window_pattern", [](hllm::ModelConfig& c) { c.sliding_window_pattern = 2; }},
      {"n_experts",
       [](hllm::ModelConfig& c) {
         c.n_experts = 4;
         c.n_experts_used = 2;
       }},
  };
  for (const auto& [field, edit] : changes) {
    hllm::ModelConfig c = base;
    edit(c);
    EXPECT_NE(hllm::model_fingerprint(c), fp) << field;
  }
  hllm::ModelConfig layer_norm = base;  // a LayerNorm's bias, against the same norm without
  layer_norm.norm = hllm::NormKind::layer;
  hllm::ModelConfig with_bias = layer_norm;
  with_bias.norm_bias = true;
  EXPECT_NE(hllm::model_fingerprint(with_bias), hllm::model_fingerprint(layer_norm));
  hllm::ModelConfig windowed = base;  // the windowed layers' own RoPE base (Gemma 3)
  windowed.sliding_window = 64;
  hllm::ModelConfig local_rope = windowed;
  local_rope.window_rope_theta = 10000.0f;
  EXPECT_NE(hllm::model_fingerprint(local_rope), hllm::model_fingerprint(windowed));
  hllm::ModelConfig experts = base;  // DeepSeek's experts: dense leading layers, an ungated
  experts.n_experts = 4;             // shared expert, scaled weights
  experts.n_experts_used = 2;
  experts.shared_expert_ffn_dim = 64;
  const std::uint64_t experts_fp = hllm::model_fingerprint(experts);
  for (void (*edit)(hllm::ModelConfig&) :
       {+[](hllm::ModelConfig& c) { c.n_dense_layers = 1; },
        +[](hllm::ModelConfig& c) { c.shared_expert_ungated = true; },
        +[](hllm::ModelConfig& c) { c.expert_weights_scale = 2.0f; }}) {
    hllm::ModelConfig c = experts;
    edit(c);
    EXPECT_NE(hllm::model_fingerprint(c), experts_fp);
  }
  hllm::ModelConfig latent = base;  // latent attention: its widths beyond the cache's shape
  latent.n_kv_heads = 1;
  latent.kv_lora_rank = 64;
  latent.rope.rot_dims = 16;
  latent.head_dim = 80;
  latent.mla_nope_dim = 32;
  latent.mla_v_dim = 32;
  hllm::ModelConfig latent_v = latent;
  latent_v.mla_v_dim = 64;
  EXPECT_NE(hllm::model_fingerprint(latent), hllm::model_fingerprint(latent_v));
  const std::pair<const char*, Edit> same[] = {
      {"name", [](hllm::ModelConfig& c) { c.name = "other"; }},
      {"context_length", [](hllm::ModelConfig& c) { c.context_length = 4096; }},
      {"tied_embeddings", [](hllm::ModelConfig& c) { c.tied_embeddings = true; }},
      {"head_dim = dim / n_heads", [](hllm::ModelConfig& c) { c.head_dim = 32; }},
      {"rot_dims = head_dim", [](hllm::ModelConfig& c) { c.rope.rot_dims = 32; }},
      {"final_softcap", [](hllm::ModelConfig& c) { c.final_softcap = 30.0f; }},
      {"logit_scale", [](hllm::ModelConfig& c) { c.logit_scale = 0.0625f; }},
  };
  for (const auto& [field, edit] : same) {
    hllm::ModelConfig c = base;
    edit(c);
    EXPECT_EQ(hllm::model_fingerprint(c), fp) << field;
  }
  const hllm::KVStateIdentity id = hllm::kv_state_identity(base);
  EXPECT_EQ(id.fingerprint, fp);
  EXPECT_EQ(id.vocab_size, 300u);
  EXPECT_EQ(id.head_dim, 32u);
  EXPECT_NE(hllm::kv_state_identity(base, 1).fingerprint, fp);
  EXPECT_NE(hllm::kv_state_identity(base, 1).fingerprint,
            hllm::kv_state_identity(base, 2).fingerprint);
  hllm::ModelConfig bad = base;
  bad.n_kv_heads = 3;
  expect_error([&] { hllm::kv_state_identity(bad); }, ErrorKind::invalid_argument, "n_kv_heads",
               "");
}

// --- round trips -----------------------------------------------------------------------------

struct Fixture {
  hllm::ModelConfig config = small_config();
  hllm::Llama<> model{config, hllm::random_weights(config, hllm::DType::f32, 7)};
  hllm::KVStateIdentity identity = hllm::kv_state_identity(config);
  hllm::BatchRunner<> runner{model, {.max_tokens = 64, .threads = 2}};
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

// For every KV element type and prompts that end inside a block (40, 1) and on a block's end
// (32, 16): compute the prompt into pool A after another sequence used and left its blocks (so
// they hold stale rows), save, load into pool B, whose blocks are numbered differently, then
// feed both the same next tokens (a chunk, then single decodes): every logit bit is the same.
// The file holds the committed rows of A and zeros where A holds the previous owner's rows.
TEST(KVState, LoadedStateContinuesBitForBit) {
  Fixture& fx = fixture();
  TempDir dir;
  std::mt19937 rng(11);
  const std::vector<KVType> types = all_kv_types();
  ASSERT_GE(types.size(), 4u);
  for (const KVType type : types)
    for (const std::size_t length : {40u, 32u, 1u, 16u}) {
      SCOPED_TRACE(std::string("kv ") + hllm::to_string(type) + ", prompt of " +
                   std::to_string(length));
      AnyPagedKVStorage storage_a = pool(type, 16);
      KVBlockAllocator allocator_a(16, kBlock);
      {
        KVBlockTable previous(kBlock);
        run_entry(fx.runner, previous, hllm::test::random_tokens(64, rng, 300), storage_a,
                  allocator_a);
        previous.release_all(allocator_a);
      }
      const auto prompt = hllm::test::random_tokens(length, rng, 300);
      KVBlockTable a(kBlock);
      run_entry(fx.runner, a, prompt, storage_a, allocator_a);
      const std::string path = dir / ("state-" + std::string(hllm::to_string(type)) + ".kv");
      hllm::save_kv_state(path, prompt, a, storage_a, fx.identity);

      // The file: the committed rows as A holds them, zeros after them in the last block.
      const KVStateFile file = KVStateFile::open(path, storage_a, fx.identity);
      ASSERT_EQ(file.n_tokens(), length);
      ASSERT_EQ(file.n_blocks(), (length + kBlock - 1) / kBlock);
      EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), file.tokens().begin()));
      const std::size_t row_bytes = storage_a.block_bytes() / (2 * 2 * 2 * kBlock);
      for (std::size_t i = 0; i < file.n_blocks(); ++i) {
        const std::size_t used = std::min(kBlock, length - i * kBlock);
        const auto* stored = storage_a.visit([&](const auto& s) {
          return reinterpret_cast<const std::byte*>(s.keys(a.blocks()[i], 0, 0));
        });
        const std::span<const std::byte> saved = file.block(i);
        bool stale_rows_differ = false;
        for (std::size_t run = 0; run < 2 * 2 * 2; ++run)
          for (std::size_t row = 0; row < kBlock; ++row) {
            const std::size_t at = (run * kBlock + row) * row_bytes;
            const auto saved_row = saved.subspan(at, row_bytes);
            if (row < used) {
              ASSERT_EQ(0, std::memcmp(saved_row.data(), stored + at, row_bytes))
                  << "block " << i << " run " << run << " row " << row;
            } else {
              ASSERT_TRUE(std::all_of(saved_row.begin(), saved_row.end(),
                                      [](std::byte b) { return b == std::byte{0}; }))
                  << "block " << i << " run " << run << " row " << row;
              stale_rows_differ |= std::memcmp(saved_row.data(), stored + at, row_bytes) != 0;
            }
          }
        if (used < kBlock) {
          EXPECT_TRUE(stale_rows_differ) << "the test's stale rows are zero";
        }
      }

      AnyPagedKVStorage storage_b = pool(type, 12);
      KVBlockAllocator allocator_b(12, kBlock);
      KVBlockTable other(kBlock);
      ASSERT_TRUE(other.reserve(allocator_b, 3 * kBlock));  // B's blocks 0..2 are someone else's
      KVBlockTable b(kBlock);
      const auto tokens = hllm::load_kv_state(path, b, storage_b, allocator_b, fx.identity);
      EXPECT_EQ(tokens, prompt);
      EXPECT_EQ(b.length(), length);
      EXPECT_EQ(b.blocks().front(), 3u);
      allocator_b.check_invariants();

      const auto next = hllm::test::random_tokens(5, rng, 300);
      for (const auto& [first, count] :
           {std::pair<std::size_t, std::size_t>{0, 3}, {3, 1}, {4, 1}}) {
        const auto step = std::span(next).subspan(first, count);
        const auto logits_a = run_entry(fx.runner, a, step, storage_a, allocator_a);
        const auto logits_b = run_entry(fx.runner, b, step, storage_b, allocator_b);
        ASSERT_EQ(logits_a.size(), logits_b.size());
        ASSERT_EQ(0, std::memcmp(logits_a.data(), logits_b.data(), logits_a.size() * sizeof(float)))
            << "next tokens " << first << ".." << first + count;
      }
      a.release_all(allocator_a);
      for (KVBlockTable* t : {&b, &other}) t->release_all(allocator_b);
      EXPECT_EQ(allocator_b.n_free(), 12u);
      allocator_b.check_invariants();
    }
}

// What a server does with a loaded system prompt: publish its full blocks and release the table,
// so they sit in the prefix cache; a later prompt that starts with those tokens takes them
// (reuse_prefix) and its logits are those of having computed everything.
TEST(KVState, LoadedBlocksServeAsACachedPrefix) {
  Fixture& fx = fixture();
  TempDir dir;
  std::mt19937 rng(12);
  const auto prompt = hllm::test::random_tokens(40, rng, 300);
  const auto rest = hllm::test::random_tokens(6, rng, 300);
  auto full = prompt;
  full.insert(full.end(), rest.begin(), rest.end());

  AnyPagedKVStorage storage_a = pool(KVType::q8_0, 8);
  KVBlockAllocator allocator_a(8, kBlock);
  KVBlockTable a(kBlock);
  run_entry(fx.runner, a, prompt, storage_a, allocator_a);
  hllm::save_kv_state(dir / "prefix.kv", prompt, a, storage_a, fx.identity);
  const auto expected = run_entry(fx.runner, a, rest, storage_a, allocator_a);

  AnyPagedKVStorage storage_b = pool(KVType::q8_0, 8);
  KVBlockAllocator allocator_b(8, kBlock);
  {
    const KVStateFile state = KVStateFile::open(dir / "prefix.kv", storage_b, fx.identity);
    KVBlockTable loaded(kBlock);
    ASSERT_TRUE(loaded.reserve(allocator_b, state.n_tokens()));
    state.restore(loaded, storage_b, allocator_b);
    EXPECT_EQ(loaded.publish_full_blocks(allocator_b, state.tokens()), 2u);
    loaded.release_all(allocator_b);
  }
  EXPECT_EQ(allocator_b.n_cached(), 2u);  // the partial third block went back to the free list
  KVBlockTable b(kBlock);
  const std::size_t reused = b.reuse_prefix(allocator_b, full);
  ASSERT_EQ(reused, 32u);
  const auto logits =
      run_entry(fx.runner, b, std::span(full).subspan(reused), storage_b, allocator_b);
  const std::size_t vocab = fx.model.vocab_size();
  ASSERT_EQ(logits.size(), (full.size() - reused) * vocab);
  // Rows for positions 40.. are the ones `expected` holds.
  EXPECT_EQ(0, std::memcmp(logits.data() + (prompt.size() - reused) * vocab, expected.data(),
                           expected.size() * sizeof(float)));
  b.release_all(allocator_b);
  a.release_all(allocator_a);
  allocator_b.check_invariants();
}

// An empty table saves as a state of no tokens and loads back as one.
TEST(KVState, AnEmptySequenceRoundTrips) {
  Fixture& fx = fixture();
  TempDir dir;
  AnyPagedKVStorage storage = pool(KVType::f32, 4);
  KVBlockAllocator allocator(4, kBlock);
  KVBlockTable empty(kBlock);
  hllm::save_kv_state(dir / "empty.kv", {}, empty, storage, fx.identity);
  EXPECT_EQ(fs::file_size(dir / "empty.kv"), format::kTokensAt + 8);
  KVBlockTable b(kBlock);
  EXPECT_TRUE(hllm::load_kv_state(dir / "empty.kv", b, storage, allocator, fx.identity).empty());
  EXPECT_EQ(b.length(), 0u);
  EXPECT_EQ(allocator.n_free(), 4u);
}

// --- refusals --------------------------------------------------------------------------------

// A sliding window's released blocks are gone: such a sequence is refused, and no file is left.
TEST(KVState, ASequenceWithReleasedBlocksIsNotSaved) {
  Fixture& fx = fixture();
  TempDir dir;
  AnyPagedKVStorage storage = pool(KVType::f32, 4);
  KVBlockAllocator allocator(4, kBlock);
  KVBlockTable table(kBlock);
  ASSERT_TRUE(table.reserve(allocator, 3 * kBlock));
  table.advance(3 * kBlock);
  ASSERT_EQ(table.release_before(allocator, kBlock), 1u);
  const std::vector<std::int32_t> tokens(3 * kBlock, 5);
  expect_error(
      [&] { hllm::save_kv_state(dir / "windowed.kv", tokens, table, storage, fx.identity); },
      ErrorKind::invalid_argument, "", dir / "windowed.kv", std::nullopt,
      "sliding window released");
  EXPECT_EQ(dir.entries(), 0u);
  table.release_all(allocator);
}

// A saved f16 state of 40 tokens (three blocks, the last partial) and everything to load it.
struct SavedState {
  TempDir dir;
  std::string source = dir / "source.kv";
  std::string path = dir / "state.kv";
  std::vector<std::byte> bytes;
  std::uint64_t blocks_at = format::kTokensAt + 4 * 40;
  std::uint64_t block_bytes = 0;
  std::uint64_t checksum_at = 0;

  SavedState() {
    Fixture& fx = fixture();
    AnyPagedKVStorage storage = pool(KVType::f16, 4);
    KVBlockAllocator allocator(4, kBlock);
    KVBlockTable table(kBlock);
    std::mt19937 rng(3);
    const auto prompt = hllm::test::random_tokens(40, rng, 300);
    run_entry(fx.runner, table, prompt, storage, allocator);
    hllm::save_kv_state(source, prompt, table, storage, fx.identity);
    table.release_all(allocator);
    bytes = read_bytes(source);
    block_bytes = storage.block_bytes();
    checksum_at = blocks_at + 3 * block_bytes;
    EXPECT_EQ(bytes.size(), checksum_at + 8);
  }
};

// Loads `bytes` (written to a file) into a fresh f16 pool of 8 blocks, or into `storage` and
// `identity` when given, and expects the error; the table stays empty and every block free.
void expect_refused(const SavedState& s, const std::vector<std::byte>& bytes, ErrorKind kind,
                    const std::string& field, std::optional<std::uint64_t> offset,
                    const std::string& message, AnyPagedKVStorage* storage = nullptr,
                    const hllm::KVStateIdentity* identity = nullptr,
                    std::size_t max_tokens = KVStateFile::kNoTokenLimit) {
  write_bytes(s.path, bytes);
  AnyPagedKVStorage own = pool(KVType::f16, 8);
  AnyPagedKVStorage& target = storage ? *storage : own;
  KVBlockAllocator allocator(target.n_blocks(), target.block_tokens());
  KVBlockTable table(target.block_tokens());
  expect_error(
      [&] {
        hllm::load_kv_state(s.path, table, target, allocator,
                            identity ? *identity : fixture().identity, max_tokens);
      },
      kind, field, s.path, offset, message);
  try {
    hllm::load_kv_state(s.path, table, target, allocator, identity ? *identity : fixture().identity,
                        max_tokens);
  } catch (const hllm::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(s.path), std::string::npos) << what;
    if (offset) {
      EXPECT_NE(what.find("at byte offset " + std::to_string(*offset)), std::string::npos) << what;
    }
  }
  EXPECT_EQ(table.length(), 0u);
  EXPECT_TRUE(table.blocks().empty());
  EXPECT_EQ(allocator.n_free(), allocator.n_blocks());
  allocator.check_invariants();
}

std::vector<std::byte> flipped(std::vector<std::byte> bytes, std::uint64_t at) {
  bytes[at] ^= std::byte{0x5a};
  return bytes;
}

TEST(KVStateCorrupt, HeaderTokensPayloadAndChecksumFlips) {
  const SavedState s;
  expect_refused(s, flipped(s.bytes, 0), ErrorKind::format, "header.magic", 0, "magic");
  auto v = s.bytes;
  put(v, format::kVersionAt, 2, 4);
  expect_refused(s, v, ErrorKind::unsupported, "header.version", 8, "version 2");
  put(v, format::kVersionAt, 0, 4);
  expect_refused(s, v, ErrorKind::format, "header.version", 8, "version 0");
  for (const std::uint64_t at :
       {format::kBlockTokensAt, format::kKVTypeAt + 1, format::kDimAt, format::kFingerprintAt + 3,
        format::kNTokensAt, format::kBlockBytesAt + 7, format::kHeaderChecksumAt + 2}) {
    SCOPED_TRACE("header byte " + std::to_string(at));
    expect_refused(s, flipped(s.bytes, at), ErrorKind::format, "header.checksum", 88,
                   "header checksum mismatch");
  }
  for (const std::uint64_t at : {format::kTokensAt + 4 * 7, s.blocks_at, s.blocks_at + 5000,
                                 s.checksum_at - 1, s.checksum_at, s.checksum_at + 7}) {
    SCOPED_TRACE("byte " + std::to_string(at));
    expect_refused(s, flipped(s.bytes, at), ErrorKind::format, "checksum", s.checksum_at,
                   "checksum mismatch");
  }
}

TEST(KVStateCorrupt, TruncationNamesTheFieldItCuts) {
  const SavedState s;
  const auto cut = [&](std::uint64_t size) {
    return std::vector<std::byte>(s.bytes.begin(), s.bytes.begin() + static_cast<long>(size));
  };
  struct Case {
    std::uint64_t size;
    const char* field;
    std::uint64_t offset;
  };
  const std::uint64_t bb = s.block_bytes;
  for (const Case& c :
       std::initializer_list<Case>{{0, "header.magic", 0},
                                   {5, "header.magic", 0},
                                   {8, "header.version", 8},
                                   {50, "header.dim", 48},
                                   {95, "header.checksum", 88},
                                   {96, "tokens", 96},
                                   {96 + 4 * 10 + 2, "tokens", 96 + 40},
                                   {s.blocks_at, "blocks", s.blocks_at},
                                   {s.blocks_at + bb + 100, "blocks", s.blocks_at + bb},
                                   {s.checksum_at, "checksum", s.checksum_at},
                                   {s.checksum_at + 7, "checksum", s.checksum_at}}) {
    SCOPED_TRACE("cut at " + std::to_string(c.size));
    expect_refused(s, cut(c.size), ErrorKind::format, c.field, c.offset, "truncated");
  }
  auto longer = s.bytes;
  longer.push_back(std::byte{0});
  expect_refused(s, longer, ErrorKind::format, "checksum", s.checksum_at + 8,
                 "bytes after the checksum");
}

// Every prefix of the file and every single-byte change of it, checked in memory: each is an
// Error naming the file with an offset inside it, never a crash or a success.
TEST(KVStateCorrupt, EveryTruncationAndEveryByteFlipIsRefused) {
  const SavedState s;
  AnyPagedKVStorage storage = pool(KVType::f16, 8);
  const auto refused = [&](std::span<const std::byte> bytes, const std::string& what) {
    try {
      KVStateFile::from_memory(bytes, "mem.kv", storage, fixture().identity);
      ADD_FAILURE() << what << " was accepted";
    } catch (const hllm::Error& e) {
      EXPECT_TRUE(e.kind() == ErrorKind::format || e.kind() == ErrorKind::unsupported) << e.what();
      EXPECT_EQ(e.file(), "mem.kv");
      ASSERT_TRUE(e.offset().has_value()) << e.what();
      EXPECT_LE(*e.offset(), s.bytes.size()) << e.what();
    }
  };
  for (std::size_t size = 0; size < s.bytes.size(); ++size)
    refused(std::span(s.bytes).first(size), "the first " + std::to_string(size) + " bytes");
  std::vector<std::byte> bytes = s.bytes;
  for (std::size_t at = 0; at < bytes.size(); ++at) {
    bytes[at] ^= std::byte{0x01};
    refused(bytes, "a flip of byte " + std::to_string(at));
    bytes[at] ^= std::byte{0x01};
  }
  EXPECT_NO_THROW(KVStateFile::from_memory(bytes, "mem.kv", storage, fixture().identity));
}

TEST(KVStateCorrupt, AnotherModelOrPoolIsRefused) {
  const SavedState s;
  hllm::KVStateIdentity other = fixture().identity;
  other.fingerprint ^= 1;
  expect_refused(s, s.bytes, ErrorKind::invalid_argument, "header.fingerprint", 56, "another model",
                 nullptr, &other);
  hllm::ModelConfig bigger = small_config();
  bigger.vocab_size = 301;
  const hllm::KVStateIdentity bigger_vocab = hllm::kv_state_identity(bigger);
  expect_refused(s, s.bytes, ErrorKind::invalid_argument, "header.vocab_size", 52,
                 "vocab_size = 300, the model 301", nullptr, &bigger_vocab);
  other = fixture().identity;
  other.n_heads = 4;
  expect_refused(s, s.bytes, ErrorKind::invalid_argument, "header.n_heads", 44,
                 "n_heads = 8, the model 4", nullptr, &other);
  other = fixture().identity;
  other.n_layers = 3;
  AnyPagedKVStorage three_layers = pool(KVType::f16, 8, kBlock, 3);
  expect_refused(s, s.bytes, ErrorKind::invalid_argument, "header.n_layers", 32,
                 "n_layers = 2, the model 3", &three_layers, &other);
  for (const KVType type : all_kv_types()) {
    if (type == KVType::f16) continue;
    AnyPagedKVStorage storage = pool(type, 8);
    expect_refused(s, s.bytes, ErrorKind::invalid_argument, "header.kv_type", 16,
                   std::string("holds f16 keys and values, the KV pool ") + hllm::to_string(type),
                   &storage);
  }
  AnyPagedKVStorage small_blocks = pool(KVType::f16, 8, 8);
  expect_refused(s, s.bytes, ErrorKind::invalid_argument, "header.block_tokens", 12,
                 "block_tokens = 16, the KV pool 8", &small_blocks);
  // The caller's own mismatch (a model that does not fit its pool) is refused before any file.
  AnyPagedKVStorage wide = AnyPagedKVStorage(KVType::f16, 8, kBlock, 2, 2, 64);
  expect_refused(s, s.bytes, ErrorKind::invalid_argument, "", std::nullopt, "does not fit", &wide);
}

// Files whose checksums are right but whose fields lie: each lie is found by its own check.
TEST(KVStateCorrupt, ResealedLiesAreFoundByTheirOwnChecks) {
  const SavedState s;
  const auto edited = [&](auto&& edit) {
    auto bytes = s.bytes;
    edit(bytes);
    reseal(bytes);
    return bytes;
  };
  expect_refused(s, edited([](auto& b) { std::memcpy(&b[format::kKVTypeAt], "q3_x", 4); }),
                 ErrorKind::unsupported, "header.kv_type", 16, "\"q3_x\"");
  expect_refused(s, edited([](auto& b) { b[format::kKVTypeAt + 10] = std::byte{'x'}; }),
                 ErrorKind::format, "header.kv_type", 16, "NUL-padded");
  expect_refused(s, edited([](auto& b) { put(b, format::kNBlocksAt, 2, 8); }), ErrorKind::format,
                 "header.n_blocks", 72, "2 blocks for 40 tokens");
  expect_refused(s, edited([](auto& b) { put(b, format::kBlockBytesAt, 4096, 8); }),
                 ErrorKind::format, "header.block_bytes", 80, "blocks of 4096 bytes");
  expect_refused(s, edited([](auto& b) { put(b, format::kNTokensAt, std::uint64_t{1} << 60, 8); }),
                 ErrorKind::capacity, "header.n_tokens", 64, "more than the whole KV pool");
  expect_refused(s, edited([](auto& b) { put(b, format::kNTokensAt, 48, 8); }), ErrorKind::format,
                 "blocks", s.blocks_at + 32 + 2 * s.block_bytes, "truncated");
  expect_refused(s, edited([](auto& b) { put(b, format::kTokensAt + 4 * 5, 300, 4); }),
                 ErrorKind::out_of_range, "tokens", format::kTokensAt + 20,
                 "token 5 is 300, outside the vocabulary of 300");
  expect_refused(s, edited([](auto& b) { put(b, format::kTokensAt + 4 * 39, 0xffffffff, 4); }),
                 ErrorKind::out_of_range, "tokens", format::kTokensAt + 156, "token 39 is -1");
}

TEST(KVStateCorrupt, TooFewBlocksIsCapacityAndLeavesThePoolAsItWas) {
  const SavedState s;
  // More tokens than the caller allows, or than the whole pool holds.
  expect_refused(s, s.bytes, ErrorKind::capacity, "header.n_tokens", 64, "limit of 39", nullptr,
                 nullptr, 39);
  AnyPagedKVStorage two = pool(KVType::f16, 2);
  expect_refused(s, s.bytes, ErrorKind::capacity, "header.n_tokens", 64,
                 "more than the whole KV pool (2 blocks of 16 tokens)", &two);
  // A pool of four blocks, two of them held: three are needed, two are there.
  write_bytes(s.path, s.bytes);
  AnyPagedKVStorage storage = pool(KVType::f16, 4);
  KVBlockAllocator allocator(4, kBlock);
  KVBlockTable held(kBlock), table(kBlock);
  ASSERT_TRUE(held.reserve(allocator, 2 * kBlock));
  expect_error([&] { hllm::load_kv_state(s.path, table, storage, allocator, fixture().identity); },
               ErrorKind::capacity, "header.n_tokens", s.path, 64,
               "needs 3 KV blocks; the pool has 2 available");
  EXPECT_TRUE(table.blocks().empty());
  EXPECT_EQ(allocator.n_free(), 2u);
  EXPECT_EQ(allocator.n_referenced(), 2u);
  allocator.check_invariants();
  // Cached blocks count as available: they are evicted for the state.
  std::mt19937 rng(1);
  const auto tokens = hllm::test::random_tokens(2 * kBlock, rng, 300);
  held.advance(2 * kBlock);
  EXPECT_EQ(held.publish_full_blocks(allocator, tokens), 2u);
  held.release_all(allocator);
  EXPECT_EQ(allocator.n_cached(), 2u);
  EXPECT_EQ(hllm::load_kv_state(s.path, table, storage, allocator, fixture().identity).size(), 40u);
  EXPECT_EQ(allocator.n_referenced(), 3u);
  table.release_all(allocator);
  EXPECT_EQ(allocator.n_free() + allocator.n_cached(), 4u);
  allocator.check_invariants();
}

TEST(KVStateCorrupt, MisuseAndFilesThatAreNotThere) {
  const SavedState s;
  AnyPagedKVStorage storage = pool(KVType::f16, 8);
  KVBlockAllocator allocator(8, kBlock);
  const hllm::KVStateIdentity& id = fixture().identity;
  KVBlockTable table(kBlock);
  ASSERT_TRUE(table.reserve(allocator, 1));
  expect_error([&] { hllm::load_kv_state(s.source, table, storage, allocator, id); },
               ErrorKind::invalid_argument, "", s.source, std::nullopt, "needs an empty");
  table.release_all(allocator);
  const std::string missing = s.dir / "missing.kv";
  expect_error([&] { hllm::load_kv_state(missing, table, storage, allocator, id); }, ErrorKind::io,
               "", missing, std::nullopt, "cannot open KV state file");
  expect_error([&] { hllm::load_kv_state(s.dir.path.string(), table, storage, allocator, id); },
               ErrorKind::io, "", s.dir.path.string(), std::nullopt, "is a directory");

  // restore() into a table that is not ready: no room, committed tokens, a shared block.
  const KVStateFile state = KVStateFile::open(s.source, storage, id);
  KVBlockTable short_table(kBlock);
  ASSERT_TRUE(short_table.reserve(allocator, 2 * kBlock));
  expect_error([&] { state.restore(short_table, storage, allocator); }, ErrorKind::invalid_argument,
               "", s.source, std::nullopt, "lacks room");
  ASSERT_TRUE(short_table.reserve(allocator, 3 * kBlock));
  KVBlockTable fork = short_table.fork(allocator);
  expect_error([&] { state.restore(short_table, storage, allocator); }, ErrorKind::invalid_argument,
               "", s.source, std::nullopt, "lacks room of its own");
  fork.release_all(allocator);
  short_table.advance(1);
  expect_error([&] { state.restore(short_table, storage, allocator); }, ErrorKind::invalid_argument,
               "", s.source, std::nullopt, "1 committed tokens");
  short_table.truncate(allocator, 0);
  ASSERT_TRUE(short_table.reserve(allocator, 40));
  AnyPagedKVStorage q8 = pool(KVType::q8_0, 8);
  expect_error([&] { state.restore(short_table, q8, allocator); }, ErrorKind::invalid_argument, "",
               s.source, std::nullopt, "another shape");
  state.restore(short_table, storage, allocator);
  EXPECT_EQ(short_table.length(), 40u);
  short_table.release_all(allocator);
  EXPECT_EQ(allocator.n_free(), 8u);
}

TEST(KVStateSave, RefusalsAndReplacingAFile) {
  Fixture& fx = fixture();
  TempDir dir;
  AnyPagedKVStorage storage = pool(KVType::bf16, 4);
  KVBlockAllocator allocator(4, kBlock);
  KVBlockTable table(kBlock);
  std::mt19937 rng(9);
  auto prompt = hllm::test::random_tokens(20, rng, 300);
  run_entry(fx.runner, table, prompt, storage, allocator);
  const std::string path = dir / "state.kv";
  expect_error(
      [&] { hllm::save_kv_state(path, std::span(prompt).first(19), table, storage, fx.identity); },
      ErrorKind::invalid_argument, "", path, std::nullopt, "got 19 tokens");
  prompt[3] = 300;
  expect_error([&] { hllm::save_kv_state(path, prompt, table, storage, fx.identity); },
               ErrorKind::out_of_range, "", path, std::nullopt, "token 3 is 300");
  prompt[3] = 1;
  hllm::KVStateIdentity other = fx.identity;
  other.head_dim = 64;
  expect_error([&] { hllm::save_kv_state(path, prompt, table, storage, other); },
               ErrorKind::invalid_argument, "", path, std::nullopt, "does not fit the KV pool");
  const std::string nowhere = dir / "no-such-dir/state.kv";
  expect_error([&] { hllm::save_kv_state(nowhere, prompt, table, storage, fx.identity); },
               ErrorKind::io, "", nowhere, std::nullopt, "cannot create KV state file");
  expect_error([&] { hllm::save_kv_state(dir.path.string(), prompt, table, storage, fx.identity); },
               ErrorKind::io, "", dir.path.string(), std::nullopt, "is a directory");
  EXPECT_EQ(dir.entries(), 0u);  // no state and no temporary left behind

  // Saving onto an existing file replaces it whole; only the one file remains.
  write_bytes(path, std::vector<std::byte>(100000, std::byte{7}));
  hllm::save_kv_state(path, prompt, table, storage, fx.identity);
  EXPECT_EQ(dir.entries(), 1u);
  EXPECT_EQ(fs::file_size(path), format::kTokensAt + 4 * 20 + 2 * storage.block_bytes() + 8);
  KVBlockTable loaded(kBlock);
  EXPECT_EQ(hllm::load_kv_state(path, loaded, storage, allocator, fx.identity), prompt);
  // A typed pool takes the same calls.
  auto& typed = storage.get<hllm::bf16>();
  hllm::save_kv_state(path, prompt, loaded, typed, fx.identity);
  KVBlockTable again(kBlock);
  loaded.release_all(allocator);
  EXPECT_EQ(hllm::load_kv_state(path, again, typed, allocator, fx.identity), prompt);
  for (KVBlockTable* t : {&table, &again}) t->release_all(allocator);
  EXPECT_EQ(allocator.n_free(), 4u);
}

}  // namespace
