#pragma once
// KV state files: a sequence's tokens and the keys and values of its paged-cache blocks, saved
// so that a long system prompt is computed once per deployment and loaded into any later
// process's pool instead of prefilled again. The layout is in docs/formats.md ("KV state
// files"): a fixed 96-byte header (magic, version, element type, block size, the model's counts
// and fingerprint, the token and block counts, a header checksum), the tokens, the whole blocks,
// and an XXH64 checksum of every byte before it. Little-endian; element bytes as the pool holds
// them (core/kv_element.hpp), so a load is a copy, never a conversion.
//
// A state is only meaningful to the model and cache that computed it, so loading checks, before
// anything of the pool is touched: the magic and version, the header checksum, the element type,
// block size and dimensions against the pool, the counts and fingerprint against the model
// (KVStateIdentity), the token count against the pool and a caller's limit, the file's size
// against the counts (truncation), the checksum, and every token id against the vocabulary. Each
// failure is an hllm::Error naming the file, the field and its byte offset.
//
// Two levels. save_kv_state / load_kv_state do everything for one block table. Underneath,
// KVStateFile::open validates a file and holds it mapped, and restore() copies it into a table
// the caller has reserved; with it a server can, for instance, publish a loaded state's full
// blocks into the prefix cache (KVBlockTable::publish_full_blocks, then release_all: the blocks
// stay cached and later prompts starting with the tokens take them through reuse_prefix).

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/core/kv_element.hpp"
#include "hllm/core/xxh64.hpp"
#include "hllm/io/input_file.hpp"
#include "hllm/io/mapped_file.hpp"
#include "hllm/io/output_file.hpp"
#include "hllm/model/config.hpp"
#include "hllm/nn/kv_block_allocator.hpp"
#include "hllm/nn/kv_block_table.hpp"
#include "hllm/nn/paged_kv_storage.hpp"

namespace hllm {

// What computed a KV state, which whoever loads it must be: the model's counts, and a 64-bit
// fingerprint of everything else that shapes its keys and values (kv_state_identity).
struct KVStateIdentity {
  std::uint32_t vocab_size = 0;
  std::uint32_t dim = 0;
  std::uint32_t n_layers = 0;
  std::uint32_t n_heads = 0;
  std::uint32_t n_kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint64_t fingerprint = 0;

  friend bool operator==(const KVStateIdentity&, const KVStateIdentity&) = default;
};

// XXH64 of the config fields that change a model's keys and values: the counts, the FFN width
// (a layer's FFN output is the next layer's input), the norm epsilon, every RoPE parameter (keys
// are stored rotated), the sliding window and the block variants of other families (which a
// plain Llama config has none of, so its fingerprint is what it was before they existed). Not
// the name, the training context or tied
// embeddings, which change only the logits. A field added to ModelConfig that changes keys or
// values belongs here (and in the test of this function).
inline std::uint64_t model_fingerprint(const ModelConfig& c) {
  Xxh64 h;
  const auto add = [&](std::uint64_t v) {
    std::byte le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<std::byte>(v >> (8 * i));
    h.update(le);
  };
  const auto add_float = [&](float v) { add(std::bit_cast<std::uint32_t>(v)); };
  const std::string_view tag = "hllm model fingerprint 1";
  h.update(std::as_bytes(std::span(tag)));
  const std::int64_t head_dim = c.resolved_head_dim();
  for (const std::int64_t v : {c.vocab_size, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, head_dim,
                               c.ffn_dim, c.sliding_window})
    add(static_cast<std::uint64_t>(v));
  add_float(c.rms_eps);
  const RopeConfig& r = c.rope;
  add(static_cast<std::uint64_t>(r.layout));
  add_float(r.theta);
  add(static_cast<std::uint64_t>(r.rot_dims == 0 ? head_dim : r.rot_dims));
  add(static_cast<std::uint64_t>(r.scaling.type));
  add(static_cast<std::uint64_t>(r.scaling.original_context));
  for (const float v : {r.scaling.factor, r.scaling.low_freq_factor, r.scaling.high_freq_factor,
                        r.scaling.beta_fast, r.scaling.beta_slow, r.scaling.attention_factor})
    add_float(v);
  add(r.freq_factors.size());
  for (const float v : r.freq_factors) add_float(v);
  const bool variants =
      c.qkv_bias || c.qk_norm != QkNorm::none || c.layout != BlockLayout::pre_norm ||
      c.ffn_activation != GateActivation::silu || c.scale_embeddings || c.attention_scale != 0.0f ||
      c.attn_softcap != 0.0f || c.sliding_window_pattern != 0 || c.n_experts != 0;
  if (variants) {
    for (const std::int64_t v :
         {std::int64_t{c.qkv_bias}, static_cast<std::int64_t>(c.qk_norm),
          static_cast<std::int64_t>(c.layout), static_cast<std::int64_t>(c.ffn_activation),
          std::int64_t{c.scale_embeddings}, c.sliding_window_pattern, c.n_experts, c.n_experts_used,
          c.resolved_expert_ffn_dim(), std::int64_t{c.expert_weights_normalized},
          c.shared_expert_ffn_dim})
      add(static_cast<std::uint64_t>(v));
    add_float(c.attention_scale);
    add_float(c.attn_softcap);
  }
  if (c.window_rope_theta != 0.0f) add_float(c.window_rope_theta);  // the windowed layers' RoPE
  if (c.mla())  // latent attention (its cache geometry is in head_dim and n_kv_heads already)
    for (const std::int64_t v : {c.kv_lora_rank, c.q_lora_rank, c.mla_nope_dim, c.mla_v_dim})
      add(static_cast<std::uint64_t>(v));
  if (c.n_dense_layers != 0 || c.shared_expert_ungated || c.expert_weights_scale != 0.0f) {
    add(static_cast<std::uint64_t>(c.n_dense_layers));  // DeepSeek's experts
    add(std::uint64_t{c.shared_expert_ungated});
    add_float(c.expert_weights_scale);
  }
  if (c.expert_gating != ExpertGating::softmax || c.n_expert_groups != 0 ||
      c.expert_selection_bias)  // DeepSeek-V3's routing
    for (const std::int64_t v : {static_cast<std::int64_t>(c.expert_gating), c.n_expert_groups,
                                 c.n_expert_groups_used, std::int64_t{c.expert_selection_bias}})
      add(static_cast<std::uint64_t>(v));
  if (c.norm != NormKind::rms || c.norm_bias || !c.gated_ffn)  // LayerNorm, plain MLP families
    for (const std::int64_t v :
         {static_cast<std::int64_t>(c.norm), std::int64_t{c.norm_bias}, std::int64_t{c.gated_ffn}})
      add(static_cast<std::uint64_t>(v));
  if (c.parallel_ffn_norm) add(std::uint64_t{1});  // Falcon-40B's second input norm
  return h.digest();
}

// The identity of a model of config `c` (validated here): its counts, and model_fingerprint(c)
// with `weights` mixed in unless it is 0. The config cannot tell two fine-tunes, or two
// quantizations, of one model apart; `weights` is where a caller says which weights these are
// (a hash of the model file's tensor index or its data, say), so their states refuse each other.
inline KVStateIdentity kv_state_identity(const ModelConfig& c, std::uint64_t weights = 0) {
  c.validate();  // every count in [1, 2^24]: they fit the u32 fields
  KVStateIdentity id;
  id.vocab_size = static_cast<std::uint32_t>(c.vocab_size);
  id.dim = static_cast<std::uint32_t>(c.dim);
  id.n_layers = static_cast<std::uint32_t>(c.n_layers);
  id.n_heads = static_cast<std::uint32_t>(c.n_heads);
  id.n_kv_heads = static_cast<std::uint32_t>(c.n_kv_heads);
  id.head_dim = static_cast<std::uint32_t>(c.resolved_head_dim());
  id.fingerprint = model_fingerprint(c);
  if (weights != 0) {
    std::byte le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<std::byte>(weights >> (8 * i));
    id.fingerprint = xxh64(le, id.fingerprint);
  }
  return id;
}

// The layout of a KV state file, version 1 (docs/formats.md, "KV state files"): the header's
// fields at these byte offsets, then tokens, blocks and the checksum.
namespace kv_state_format {
inline constexpr std::array<char, 8> kMagic = {'H', 'L', 'L', 'M', 'K', 'V', 'S', 'T'};
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::uint64_t kMagicAt = 0;            // 8 bytes "HLLMKVST"
inline constexpr std::uint64_t kVersionAt = 8;          // u32
inline constexpr std::uint64_t kBlockTokensAt = 12;     // u32
inline constexpr std::uint64_t kKVTypeAt = 16;          // 16 bytes: to_string(KVType), NUL-padded
inline constexpr std::size_t kKVTypeBytes = 16;         // its size: a name of at most 15
inline constexpr std::uint64_t kNLayersAt = 32;         // u32
inline constexpr std::uint64_t kNKVHeadsAt = 36;        // u32
inline constexpr std::uint64_t kHeadDimAt = 40;         // u32
inline constexpr std::uint64_t kNHeadsAt = 44;          // u32
inline constexpr std::uint64_t kDimAt = 48;             // u32
inline constexpr std::uint64_t kVocabSizeAt = 52;       // u32
inline constexpr std::uint64_t kFingerprintAt = 56;     // u64
inline constexpr std::uint64_t kNTokensAt = 64;         // u64
inline constexpr std::uint64_t kNBlocksAt = 72;         // u64: ceil(n_tokens / block_tokens)
inline constexpr std::uint64_t kBlockBytesAt = 80;      // u64
inline constexpr std::uint64_t kHeaderChecksumAt = 88;  // u64: XXH64 of bytes [0, 88)
inline constexpr std::uint64_t kTokensAt = 96;          // [n_tokens] i32, then the blocks
}  // namespace kv_state_format

namespace detail {

inline void kv_state_put(std::byte* at, std::uint64_t v, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) at[i] = static_cast<std::byte>(v >> (8 * i));
}
inline std::uint64_t kv_state_get(const std::byte* at, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = n; i-- > 0;) v = (v << 8) | std::to_integer<std::uint64_t>(at[i]);
  return v;
}

// The shape of a block pool, which a state must have been saved from.
struct KVPoolShape {
  KVType type;
  std::size_t n_blocks, block_tokens, n_layers, n_kv_heads, head_dim, block_bytes;

  template <class KV>
  static KVPoolShape of(const PagedKVStorage<KV>& s) noexcept {
    return {kv_type_of<KV>(), s.n_blocks(), s.block_tokens(), s.n_layers(),
            s.n_kv_heads(),   s.head_dim(), s.block_bytes()};
  }
  static KVPoolShape of(const AnyPagedKVStorage& s) noexcept {
    return s.visit([](const auto& typed) { return of(typed); });
  }
  bool same_layout(const KVPoolShape& o) const noexcept {
    return type == o.type && block_tokens == o.block_tokens && n_layers == o.n_layers &&
           n_kv_heads == o.n_kv_heads && head_dim == o.head_dim && block_bytes == o.block_bytes;
  }
};

// Throws invalid_argument unless `id` is a model (every count positive) whose keys and values
// have the pool's shape: a caller's mistake, found before any file is read or written.
inline void check_identity_fits(const KVStateIdentity& id, const KVPoolShape& pool,
                                const std::string& path) {
  if (id.vocab_size == 0 || id.dim == 0 || id.n_layers == 0 || id.n_heads == 0 ||
      id.n_kv_heads == 0 || id.head_dim == 0)
    throw Error(ErrorKind::invalid_argument,
                "a KV state identity needs every count positive (kv_state_identity(config))", path);
  if (id.n_layers != pool.n_layers || id.n_kv_heads != pool.n_kv_heads ||
      id.head_dim != pool.head_dim)
    throw Error(ErrorKind::invalid_argument,
                "the model (" + std::to_string(id.n_layers) + " layers × " +
                    std::to_string(id.n_kv_heads) + " KV heads × " + std::to_string(id.head_dim) +
                    " dims) does not fit the KV pool (" + std::to_string(pool.n_layers) + " × " +
                    std::to_string(pool.n_kv_heads) + " × " + std::to_string(pool.head_dim) + ")",
                path);
}

inline void check_little_endian_host() {
  if constexpr (std::endian::native != std::endian::little)
    throw Error(ErrorKind::unsupported,
                "KV state files hold little-endian elements; this host "
                "is big-endian");
}

}  // namespace detail

// Writes the state of the sequence whose block table is `table` to `path`: its first
// table.length() tokens (`tokens` holds at least those: the ids of positions 0..) and the whole
// blocks holding them, from `storage`, for the model `identity` describes (kv_state_identity).
// Rows past the length in the last block are written as zeros, so a file never carries what a
// block's previous owner left there. The file appears complete or not at all (io::OutputFile);
// an existing one is replaced. Throws invalid_argument for a table, tokens or identity that do
// not fit the storage, out_of_range for a token outside the vocabulary, io if writing fails.
template <class KV>
void save_kv_state(const std::string& path, std::span<const std::int32_t> tokens,
                   const KVBlockTable& table, const PagedKVStorage<KV>& storage,
                   const KVStateIdentity& identity) {
  namespace f = kv_state_format;
  detail::check_little_endian_host();
  const detail::KVPoolShape pool = detail::KVPoolShape::of(storage);
  detail::check_identity_fits(identity, pool, path);
  const std::size_t n = table.length(), bt = pool.block_tokens;
  if (table.block_tokens() != bt)
    throw Error(ErrorKind::invalid_argument,
                "a KV block table of " + std::to_string(table.block_tokens()) +
                    "-token blocks saved from a pool of " + std::to_string(bt) + "-token blocks",
                path);
  if (bt > std::numeric_limits<std::uint32_t>::max())
    throw Error(ErrorKind::unsupported, "KV blocks of " + std::to_string(bt) + " tokens", path);
  if (table.n_released() > 0)
    throw Error(ErrorKind::invalid_argument,
                "save_kv_state of a sequence whose sliding window released its first blocks", path);
  if (tokens.size() < n)
    throw Error(ErrorKind::invalid_argument,
                "save_kv_state got " + std::to_string(tokens.size()) +
                    " tokens for a KV block table of " + std::to_string(n),
                path);
  for (std::size_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || static_cast<std::uint64_t>(tokens[i]) >= identity.vocab_size)
      throw Error(ErrorKind::out_of_range,
                  "token " + std::to_string(i) + " is " + std::to_string(tokens[i]) +
                      ", outside the vocabulary of " + std::to_string(identity.vocab_size),
                  path);
  const std::size_t n_blocks = n / bt + (n % bt != 0);
  for (std::size_t i = 0; i < n_blocks; ++i)
    if (table.blocks()[i] >= pool.n_blocks)
      throw Error(ErrorKind::invalid_argument,
                  "the KV block table holds block " + std::to_string(table.blocks()[i]) +
                      ", past the pool's " + std::to_string(pool.n_blocks),
                  path);

  std::array<std::byte, f::kTokensAt> header{};
  std::memcpy(header.data(), f::kMagic.data(), f::kMagic.size());
  detail::kv_state_put(&header[f::kVersionAt], f::kVersion, 4);
  detail::kv_state_put(&header[f::kBlockTokensAt], bt, 4);
  const std::string_view type_name = to_string(pool.type);
  if (type_name.size() >= f::kKVTypeBytes)
    throw Error(ErrorKind::internal,
                "KV element type name \"" + std::string(type_name) + "\" does not fit the header",
                path);
  std::memcpy(&header[f::kKVTypeAt], type_name.data(), type_name.size());
  detail::kv_state_put(&header[f::kNLayersAt], identity.n_layers, 4);
  detail::kv_state_put(&header[f::kNKVHeadsAt], identity.n_kv_heads, 4);
  detail::kv_state_put(&header[f::kHeadDimAt], identity.head_dim, 4);
  detail::kv_state_put(&header[f::kNHeadsAt], identity.n_heads, 4);
  detail::kv_state_put(&header[f::kDimAt], identity.dim, 4);
  detail::kv_state_put(&header[f::kVocabSizeAt], identity.vocab_size, 4);
  detail::kv_state_put(&header[f::kFingerprintAt], identity.fingerprint, 8);
  detail::kv_state_put(&header[f::kNTokensAt], n, 8);
  detail::kv_state_put(&header[f::kNBlocksAt], n_blocks, 8);
  detail::kv_state_put(&header[f::kBlockBytesAt], pool.block_bytes, 8);
  detail::kv_state_put(&header[f::kHeaderChecksumAt],
                       xxh64(std::span(header).first(f::kHeaderChecksumAt)), 8);

  io::OutputFile out = io::OutputFile::create(path, "KV state file");
  Xxh64 checksum;
  const auto emit = [&](std::span<const std::byte> bytes) {
    checksum.update(bytes);
    out.write(bytes);
  };
  emit(header);
  std::vector<std::byte> buffer(std::max<std::size_t>(4096 * 4, pool.block_bytes));
  for (std::size_t i = 0; i < n;) {  // the tokens, little-endian, 4096 at a time
    const std::size_t count = std::min<std::size_t>(4096, n - i);
    for (std::size_t j = 0; j < count; ++j)
      detail::kv_state_put(&buffer[4 * j], static_cast<std::uint32_t>(tokens[i + j]), 4);
    emit(std::span(buffer).first(4 * count));
    i += count;
  }
  const std::size_t row_bytes = kv_row_elements<KV>(pool.head_dim) * sizeof(KV);
  for (std::size_t i = 0; i < n_blocks; ++i) {
    const std::byte* block = storage.block_data(table.blocks()[i]).data();
    const std::size_t used = std::min(bt, n - i * bt);
    if (used == bt) {
      emit({block, pool.block_bytes});
      continue;
    }
    // The last, partial block: each (layer, K or V, head) run of bt rows keeps `used` rows.
    std::memcpy(buffer.data(), block, pool.block_bytes);
    for (std::size_t run = 0; run < pool.n_layers * 2 * pool.n_kv_heads; ++run)
      std::memset(buffer.data() + (run * bt + used) * row_bytes, 0, (bt - used) * row_bytes);
    emit(std::span(buffer).first(pool.block_bytes));
  }
  std::byte sum[8];
  detail::kv_state_put(sum, checksum.digest(), 8);
  out.write(sum);
  out.commit();
}

// The same for a pool whose element type is chosen at run time.
inline void save_kv_state(const std::string& path, std::span<const std::int32_t> tokens,
                          const KVBlockTable& table, const AnyPagedKVStorage& storage,
                          const KVStateIdentity& identity) {
  storage.visit([&](const auto& typed) { save_kv_state(path, tokens, table, typed, identity); });
}

// A KV state file, opened, checked completely against a pool and a model, and kept mapped until
// restore() copies it into a block table.
class KVStateFile {
 public:
  static constexpr std::size_t kNoTokenLimit = std::numeric_limits<std::size_t>::max();

  // Maps `path` and checks it for a pool of `storage`'s shape and the model `identity`
  // describes, and against at most `max_tokens` tokens (a server's per-sequence limit). Throws
  // what io::InputFile::open and io::MappedFile::open throw, then an Error naming the file, the
  // field and its byte offset: format for a malformed, truncated or corrupt file (the header
  // checksum, the checksum), unsupported for a newer version or an unknown element type,
  // invalid_argument for a state of another element type, block size, dimensions or model,
  // capacity for more tokens than the pool holds or max_tokens allows, out_of_range for a token
  // outside the vocabulary. The storage is only looked at: nothing is written.
  template <class KV>
  static KVStateFile open(const std::string& path, const PagedKVStorage<KV>& storage,
                          const KVStateIdentity& identity, std::size_t max_tokens = kNoTokenLimit) {
    return open(path, detail::KVPoolShape::of(storage), identity, max_tokens);
  }
  static KVStateFile open(const std::string& path, const AnyPagedKVStorage& storage,
                          const KVStateIdentity& identity, std::size_t max_tokens = kNoTokenLimit) {
    return open(path, detail::KVPoolShape::of(storage), identity, max_tokens);
  }

  // The same checks over bytes the caller owns and keeps alive as long as this object (tests,
  // fuzzing); `name` stands for the path in messages.
  static KVStateFile from_memory(std::span<const std::byte> bytes, std::string name,
                                 const AnyPagedKVStorage& storage, const KVStateIdentity& identity,
                                 std::size_t max_tokens = kNoTokenLimit) {
    KVStateFile state(std::make_shared<const io::MappedFile>(
        io::MappedFile::from_memory(bytes, std::move(name))));
    state.parse(detail::KVPoolShape::of(storage), identity, max_tokens);
    return state;
  }

  const std::string& path() const noexcept { return file_->path(); }
  KVType kv_type() const noexcept { return pool_.type; }
  std::size_t block_tokens() const noexcept { return pool_.block_tokens; }
  std::size_t block_bytes() const noexcept { return pool_.block_bytes; }
  std::size_t n_tokens() const noexcept { return tokens_.size(); }
  // Blocks the state fills: ceil(n_tokens / block_tokens).
  std::size_t n_blocks() const noexcept { return n_blocks_; }
  // The ids of positions 0..n_tokens - 1.   [n_tokens]
  std::span<const std::int32_t> tokens() const noexcept { return tokens_; }
  // The bytes of block i, positions [i * block_tokens, (i + 1) * block_tokens) in the pool's
  // layout, zeros past n_tokens.   [block_bytes]
  std::span<const std::byte> block(std::size_t i) const {
    if (i >= n_blocks_)
      throw Error(ErrorKind::out_of_range, "block " + std::to_string(i) + " of a KV state of " +
                                               std::to_string(n_blocks_) + " blocks");
    return file_->bytes().subspan(blocks_at_ + i * pool_.block_bytes, pool_.block_bytes);
  }

  // Copies the state into positions [0, n_tokens) of `table` and commits them (its length
  // becomes n_tokens). The table must have no committed tokens and room of its own for them
  // (KVBlockTable::reserve, or prepare_append: every block they fall in referenced by this table
  // alone and unpublished), its blocks from `allocator`, whose blocks `storage` holds, of the
  // shape the file was checked against. Throws invalid_argument, with nothing written, if not.
  template <class KV>
  void restore(KVBlockTable& table, PagedKVStorage<KV>& storage,
               const KVBlockAllocator& allocator) const {
    const detail::KVPoolShape pool = detail::KVPoolShape::of(storage);
    if (!pool.same_layout(pool_))
      throw Error(ErrorKind::invalid_argument,
                  "restore into a KV pool of another shape than the one the state was checked "
                  "against",
                  path());
    if (allocator.n_blocks() != pool.n_blocks || allocator.block_tokens() != pool.block_tokens ||
        table.block_tokens() != pool.block_tokens)
      throw Error(ErrorKind::invalid_argument,
                  "the block allocator (" + std::to_string(allocator.n_blocks()) + " blocks of " +
                      std::to_string(allocator.block_tokens()) + " tokens) or the table (" +
                      std::to_string(table.block_tokens()) +
                      "-token blocks) does not describe the KV storage (" +
                      std::to_string(pool.n_blocks) + " of " + std::to_string(pool.block_tokens) +
                      ")",
                  path());
    if (table.length() != 0)
      throw Error(ErrorKind::invalid_argument,
                  "restore into a KV block table that holds " + std::to_string(table.length()) +
                      " committed tokens (it needs none)",
                  path());
    if (!table.owns_append(allocator, n_tokens()))
      throw Error(ErrorKind::invalid_argument,
                  "the KV block table lacks room of its own for the state's " +
                      std::to_string(n_tokens()) + " tokens (reserve them first)",
                  path());
    for (std::size_t i = 0; i < n_blocks_; ++i)
      std::memcpy(storage.block_data(table.blocks()[i]).data(), block(i).data(), pool_.block_bytes);
    table.advance(n_tokens());
  }
  void restore(KVBlockTable& table, AnyPagedKVStorage& storage,
               const KVBlockAllocator& allocator) const {
    storage.visit([&](auto& typed) { restore(table, typed, allocator); });
  }

 private:
  explicit KVStateFile(std::shared_ptr<const io::MappedFile> file) : file_(std::move(file)) {}

  static KVStateFile open(const std::string& path, const detail::KVPoolShape& pool,
                          const KVStateIdentity& identity, std::size_t max_tokens) {
    const io::InputFile input = io::InputFile::open(path, "KV state file");
    if (input.size() < kv_state_format::kTokensAt) {
      // Too short for a header (an empty file cannot be mapped): parse what there is, which
      // names the first field the file cuts short (or a wrong magic).
      const std::string bytes = input.read_all(kv_state_format::kTokensAt);
      KVStateFile state(std::make_shared<const io::MappedFile>(
          io::MappedFile::from_memory(std::as_bytes(std::span(bytes)), path)));
      state.parse(pool, identity, max_tokens);
      throw Error(ErrorKind::internal, "a KV state file shorter than its header was accepted",
                  path);
    }
    KVStateFile state(std::make_shared<const io::MappedFile>(io::MappedFile::open(path)));
    state.parse(pool, identity, max_tokens);
    return state;
  }

  [[noreturn]] void fail(ErrorKind kind, const std::string& message, const std::string& field,
                         std::uint64_t offset) const {
    throw Error(kind, message, path(), field, offset);
  }

  // Checks everything, in the order of the file (a field is trusted only once what protects it
  // has been checked), and keeps the pool's shape, the tokens and where the blocks begin.
  void parse(const detail::KVPoolShape& pool, const KVStateIdentity& identity,
             std::size_t max_tokens) {
    namespace f = kv_state_format;
    detail::check_little_endian_host();
    detail::check_identity_fits(identity, pool, path());
    const std::byte* base = file_->data();
    const std::uint64_t size = file_->size();
    const auto need = [&](std::uint64_t at, std::size_t n, const char* field) {
      if (at + n > size)
        fail(ErrorKind::format,
             "truncated: " + std::to_string(n) + " bytes needed at offset " + std::to_string(at) +
                 " but the file ends at " + std::to_string(size),
             field, at);
    };
    const auto read = [&](std::uint64_t at, std::size_t n, const char* field) {
      need(at, n, field);
      return detail::kv_state_get(base + at, n);
    };

    need(f::kMagicAt, f::kMagic.size(), "header.magic");
    if (std::memcmp(base, f::kMagic.data(), f::kMagic.size()) != 0)
      fail(ErrorKind::format, "not a KV state file: the magic is not \"HLLMKVST\"", "header.magic",
           f::kMagicAt);
    const std::uint64_t version = read(f::kVersionAt, 4, "header.version");
    if (version != f::kVersion)
      fail(version == 0 ? ErrorKind::format : ErrorKind::unsupported,
           "KV state format version " + std::to_string(version) + " is not supported (only " +
               std::to_string(f::kVersion) + ")",
           "header.version", f::kVersionAt);
    const std::uint64_t block_tokens = read(f::kBlockTokensAt, 4, "header.block_tokens");
    need(f::kKVTypeAt, f::kKVTypeBytes, "header.kv_type");
    const std::uint64_t n_layers = read(f::kNLayersAt, 4, "header.n_layers");
    const std::uint64_t n_kv_heads = read(f::kNKVHeadsAt, 4, "header.n_kv_heads");
    const std::uint64_t head_dim = read(f::kHeadDimAt, 4, "header.head_dim");
    const std::uint64_t n_heads = read(f::kNHeadsAt, 4, "header.n_heads");
    const std::uint64_t dim = read(f::kDimAt, 4, "header.dim");
    const std::uint64_t vocab_size = read(f::kVocabSizeAt, 4, "header.vocab_size");
    const std::uint64_t fingerprint = read(f::kFingerprintAt, 8, "header.fingerprint");
    const std::uint64_t n_tokens = read(f::kNTokensAt, 8, "header.n_tokens");
    const std::uint64_t n_blocks = read(f::kNBlocksAt, 8, "header.n_blocks");
    const std::uint64_t block_bytes = read(f::kBlockBytesAt, 8, "header.block_bytes");
    const std::uint64_t header_checksum = read(f::kHeaderChecksumAt, 8, "header.checksum");
    const std::uint64_t header_computed = xxh64({base, f::kHeaderChecksumAt});
    if (header_checksum != header_computed)
      fail(ErrorKind::format,
           "header checksum mismatch (stored " + hex(header_checksum) + ", computed " +
               hex(header_computed) + "): the header is corrupt",
           "header.checksum", f::kHeaderChecksumAt);

    // The header is as written: what it says is now compared with the pool and the model.
    const std::string_view name(reinterpret_cast<const char*>(base + f::kKVTypeAt),
                                f::kKVTypeBytes);
    const std::string_view type_name = name.substr(0, name.find('\0'));
    const bool padded = name.find_first_not_of('\0', type_name.size()) == std::string_view::npos;
    const bool printable = std::all_of(type_name.begin(), type_name.end(),
                                       [](char ch) { return ch > 0x20 && ch < 0x7f; });
    if (type_name.empty() || !padded || !printable)
      fail(ErrorKind::format, "the KV element type is not a NUL-padded name", "header.kv_type",
           f::kKVTypeAt);
    const std::optional<KVType> type = kv_type_from_name(type_name);
    if (!type)
      fail(ErrorKind::unsupported,
           "KV element type \"" + std::string(type_name) + "\" is not one this hllm knows",
           "header.kv_type", f::kKVTypeAt);
    if (*type != pool.type)
      fail(ErrorKind::invalid_argument,
           std::string("the state holds ") + to_string(*type) + " keys and values, the KV pool " +
               to_string(pool.type),
           "header.kv_type", f::kKVTypeAt);
    const auto same = [&](std::uint64_t in_file, std::uint64_t expected, const char* whose,
                          const char* field, std::uint64_t at) {
      if (in_file != expected)
        fail(ErrorKind::invalid_argument,
             "the state has " + std::string(field).substr(7) + " = " + std::to_string(in_file) +
                 ", " + whose + " " + std::to_string(expected),
             field, at);
    };
    same(block_tokens, pool.block_tokens, "the KV pool", "header.block_tokens", f::kBlockTokensAt);
    same(n_layers, identity.n_layers, "the model", "header.n_layers", f::kNLayersAt);
    same(n_kv_heads, identity.n_kv_heads, "the model", "header.n_kv_heads", f::kNKVHeadsAt);
    same(head_dim, identity.head_dim, "the model", "header.head_dim", f::kHeadDimAt);
    same(n_heads, identity.n_heads, "the model", "header.n_heads", f::kNHeadsAt);
    same(dim, identity.dim, "the model", "header.dim", f::kDimAt);
    same(vocab_size, identity.vocab_size, "the model", "header.vocab_size", f::kVocabSizeAt);
    if (fingerprint != identity.fingerprint)
      fail(ErrorKind::invalid_argument,
           "the state was computed by another model (fingerprint " + hex(fingerprint) +
               ", this model's " + hex(identity.fingerprint) + ")",
           "header.fingerprint", f::kFingerprintAt);
    if (block_bytes != pool.block_bytes)
      fail(ErrorKind::format,
           "blocks of " + std::to_string(block_bytes) + " bytes, where this shape's have " +
               std::to_string(pool.block_bytes),
           "header.block_bytes", f::kBlockBytesAt);
    const std::uint64_t pool_tokens = std::uint64_t{pool.n_blocks} * pool.block_tokens;
    if (n_tokens > pool_tokens)
      fail(ErrorKind::capacity,
           "the state holds " + std::to_string(n_tokens) +
               " tokens, more than the whole KV pool (" + std::to_string(pool.n_blocks) +
               " blocks of " + std::to_string(pool.block_tokens) + " tokens)",
           "header.n_tokens", f::kNTokensAt);
    if (n_tokens > max_tokens)
      fail(ErrorKind::capacity,
           "the state holds " + std::to_string(n_tokens) + " tokens, more than the limit of " +
               std::to_string(max_tokens),
           "header.n_tokens", f::kNTokensAt);
    if (n_blocks != n_tokens / block_tokens + (n_tokens % block_tokens != 0))
      fail(ErrorKind::format,
           std::to_string(n_blocks) + " blocks for " + std::to_string(n_tokens) +
               " tokens in blocks of " + std::to_string(block_tokens),
           "header.n_blocks", f::kNBlocksAt);

    // The sections' sizes against the file's, without overflow: each count is compared with the
    // bytes left.
    std::uint64_t left = size - f::kTokensAt;
    if (n_tokens > left / 4)
      fail(ErrorKind::format,
           "truncated: the file ends at " + std::to_string(size) + ", inside token " +
               std::to_string(left / 4) + " of " + std::to_string(n_tokens),
           "tokens", f::kTokensAt + left / 4 * 4);
    const std::uint64_t blocks_at = f::kTokensAt + 4 * n_tokens;
    left -= 4 * n_tokens;
    if (n_blocks > left / block_bytes)
      fail(ErrorKind::format,
           "truncated: the file ends at " + std::to_string(size) + ", inside block " +
               std::to_string(left / block_bytes) + " of " + std::to_string(n_blocks) + " (" +
               std::to_string(block_bytes) + " bytes each)",
           "blocks", blocks_at + left / block_bytes * block_bytes);
    const std::uint64_t checksum_at = blocks_at + n_blocks * block_bytes;
    left -= n_blocks * block_bytes;
    need(checksum_at, 8, "checksum");
    if (left > 8)
      fail(ErrorKind::format,
           std::to_string(left - 8) + " bytes after the checksum, where the file should end",
           "checksum", checksum_at + 8);
    const std::uint64_t checksum = read(checksum_at, 8, "checksum");
    const std::uint64_t computed = xxh64({base, static_cast<std::size_t>(checksum_at)});
    if (checksum != computed)
      fail(ErrorKind::format,
           "checksum mismatch (stored " + hex(checksum) + ", computed " + hex(computed) +
               "): the tokens or the keys and values are corrupt",
           "checksum", checksum_at);

    tokens_.resize(static_cast<std::size_t>(n_tokens));
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      const std::uint64_t at = f::kTokensAt + 4 * i;
      const auto id = static_cast<std::int32_t>(static_cast<std::uint32_t>(read(at, 4, "tokens")));
      if (id < 0 || static_cast<std::uint64_t>(id) >= vocab_size)
        fail(ErrorKind::out_of_range,
             "token " + std::to_string(i) + " is " + std::to_string(id) +
                 ", outside the vocabulary of " + std::to_string(vocab_size),
             "tokens", at);
      tokens_[i] = id;
    }
    pool_ = pool;
    n_blocks_ = static_cast<std::size_t>(n_blocks);
    blocks_at_ = static_cast<std::size_t>(blocks_at);
  }

  static std::string hex(std::uint64_t v) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string text = "0x";
    for (int shift = 60; shift >= 0; shift -= 4) text += kDigits[(v >> shift) & 0xf];
    return text;
  }

  std::shared_ptr<const io::MappedFile> file_;
  detail::KVPoolShape pool_{};
  std::vector<std::int32_t> tokens_;  // [n_tokens]
  std::size_t n_blocks_ = 0;
  std::size_t blocks_at_ = 0;  // byte offset of block 0
};

namespace detail {
template <class Storage>
std::vector<std::int32_t> load_kv_state(const std::string& path, KVBlockTable& table,
                                        Storage& storage, KVBlockAllocator& allocator,
                                        const KVStateIdentity& identity, std::size_t max_tokens) {
  if (!table.blocks().empty() || table.length() != 0)
    throw Error(ErrorKind::invalid_argument,
                "load_kv_state needs an empty KV block table; this one holds " +
                    std::to_string(table.blocks().size()) + " blocks",
                path);
  if (allocator.n_blocks() != storage.n_blocks() ||
      allocator.block_tokens() != storage.block_tokens() ||
      table.block_tokens() != storage.block_tokens())
    throw Error(ErrorKind::invalid_argument,
                "the block allocator (" + std::to_string(allocator.n_blocks()) + " blocks of " +
                    std::to_string(allocator.block_tokens()) + " tokens) or the table (" +
                    std::to_string(table.block_tokens()) +
                    "-token blocks) does not describe the KV storage (" +
                    std::to_string(storage.n_blocks()) + " of " +
                    std::to_string(storage.block_tokens()) + ")",
                path);
  const KVStateFile state = KVStateFile::open(path, storage, identity, max_tokens);
  // reserve() is all or nothing, so a short pool leaves the allocator and the table as they were.
  if (state.n_blocks() > allocator.n_available() || !table.reserve(allocator, state.n_tokens()))
    throw Error(ErrorKind::capacity,
                "the state needs " + std::to_string(state.n_blocks()) +
                    " KV blocks; the pool has " + std::to_string(allocator.n_available()) +
                    " available (" + std::to_string(allocator.n_free()) + " free, " +
                    std::to_string(allocator.n_cached()) + " cached) of " +
                    std::to_string(allocator.n_blocks()),
                path, "header.n_tokens", kv_state_format::kNTokensAt);
  try {
    state.restore(table, storage, allocator);
  } catch (...) {
    table.release_all(allocator);
    throw;
  }
  return {state.tokens().begin(), state.tokens().end()};
}
}  // namespace detail

// Loads the state at `path` into the empty block table `table` of the pool `storage` +
// `allocator`, for the model `identity` describes and at most `max_tokens` tokens: checks the
// file (KVStateFile::open: every error there, with nothing touched), takes
// ceil(n_tokens / block_tokens) blocks from the allocator (evicting cached ones when the free
// list is short), copies the keys and values in and commits them. Returns the tokens: the ids of
// positions 0..table.length() - 1. With too few blocks available: Error(capacity), and the
// allocator and the table are as they were. The table's blocks are its own and unpublished; a
// caller that wants them in the prefix cache publishes them (KVBlockTable::publish_full_blocks).
template <class KV>
std::vector<std::int32_t> load_kv_state(const std::string& path, KVBlockTable& table,
                                        PagedKVStorage<KV>& storage, KVBlockAllocator& allocator,
                                        const KVStateIdentity& identity,
                                        std::size_t max_tokens = KVStateFile::kNoTokenLimit) {
  return detail::load_kv_state(path, table, storage, allocator, identity, max_tokens);
}
inline std::vector<std::int32_t> load_kv_state(
    const std::string& path, KVBlockTable& table, AnyPagedKVStorage& storage,
    KVBlockAllocator& allocator, const KVStateIdentity& identity,
    std::size_t max_tokens = KVStateFile::kNoTokenLimit) {
  return detail::load_kv_state(path, table, storage, allocator, identity, max_tokens);
}

}  // namespace hllm
