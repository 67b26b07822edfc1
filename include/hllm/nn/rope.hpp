#pragma once
// Rotary position embedding (Su et al. 2021) with the long-context frequency scalings that
// Llama-family checkpoints use. The inverse frequencies are computed once, in double, at
// construction; per position only rot_dims/2 sin/cos pairs are evaluated, and they are shared by
// every head and every layer of that position.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <span>
#include <string>
#include <vector>

#include "hllm/core/error.hpp"
#include "hllm/kernels/dispatch.hpp"
#include "hllm/kernels/reference.hpp"

namespace hllm {

enum class RopeScalingType {
  none,
  linear,  // position interpolation: positions divided by factor (Chen et al. 2023)
  ntk,     // NTK-aware: base θ' = θ · factor^(d/(d-2)), d = rotated dimensions
  yarn,    // YaRN (Peng et al. 2023): per-frequency ramp + attention temperature
  llama3,  // Llama 3.1: low frequencies divided by factor, a smooth band, high kept
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  float factor = 1.0f;
  std::int64_t original_context = 0;  // yarn, llama3: the pre-training context length
  float low_freq_factor = 1.0f;       // llama3
  float high_freq_factor = 4.0f;      // llama3
  float beta_fast = 32.0f;            // yarn: rotations at which extrapolation starts
  float beta_slow = 1.0f;             // yarn: rotations at which interpolation is complete
  float attention_factor = 0.0f;      // yarn: 0 selects the paper's 0.1·ln(factor) + 1
};

struct RopeConfig {
  RopeLayout layout = RopeLayout::interleaved;
  float theta = 10000.0f;
  std::int64_t rot_dims = 0;  // leading dimensions of each head that rotate; 0 = all of them
  RopeScaling scaling;
  // Optional per-frequency divisors (GGUF `rope_freqs`, Llama 3.1's baked-in scaling).
  std::vector<float> freq_factors;
};

inline const char* to_string(RopeScalingType type) noexcept {
  switch (type) {
    case RopeScalingType::none: return "none";
    case RopeScalingType::linear: return "linear";
    case RopeScalingType::ntk: return "ntk";
    case RopeScalingType::yarn: return "yarn";
    case RopeScalingType::llama3: return "llama3";
  }
  return "?";
}

class Rope {
 public:
  Rope(const RopeConfig& config, std::int64_t head_dim)
      : layout_(config.layout),
        head_dim_(static_cast<std::size_t>(head_dim)),
        rot_dims_(static_cast<std::size_t>(config.rot_dims == 0 ? head_dim : config.rot_dims)) {
    validate(config, head_dim);
    compute_frequencies(config);
  }

  RopeLayout layout() const noexcept { return layout_; }
  std::size_t head_dim() const noexcept { return head_dim_; }
  std::size_t rot_dims() const noexcept { return rot_dims_; }
  // [rot_dims/2] inverse frequencies, after scaling.
  std::span<const double> inv_freq() const noexcept { return inv_freq_; }
  // The factor that multiplies cos and sin (YaRN's attention temperature; 1 otherwise).
  float mscale() const noexcept { return mscale_; }

  // cos, sin: [rot_dims/2] for one position, mscale folded in. Angles in double so that
  // positions in the tens of thousands keep their precision.
  void angles(std::int64_t position, float* cos, float* sin) const {
    for (std::size_t i = 0; i < inv_freq_.size(); ++i) {
      const double angle = static_cast<double>(position) * inv_freq_[i];
      cos[i] = static_cast<float>(std::cos(angle) * mscale_);
      sin[i] = static_cast<float>(std::sin(angle) * mscale_);
    }
  }

  // x: [n_heads][head_dim], rotated in place with precomputed cos/sin of one position.
  void apply(float* x, std::size_t n_heads, const float* cos, const float* sin) const {
    reference::rope(x, n_heads, head_dim_, rot_dims_, layout_, cos, sin);
  }
  // The same with a kernel table's vectorized rotation.
  void apply(float* x, std::size_t n_heads, const float* cos, const float* sin,
             const kernels::KernelTable& kernels) const {
    kernels.rope(x, n_heads, head_dim_, rot_dims_, layout_, cos, sin);
  }

  // Convenience for one position (allocates; the model uses angles() + apply()).
  void apply(float* x, std::size_t n_heads, std::int64_t position) const {
    std::vector<float> cos(rot_dims_ / 2), sin(rot_dims_ / 2);
    angles(position, cos.data(), sin.data());
    apply(x, n_heads, cos.data(), sin.data());
  }

  // cos, sin: [rot_dims/2] of the rotation by `delta` positions, without mscale: apply() with
  // them turns x rotated at position p (mscale applied once already) into x rotated at p + delta,
  // since rotations compose. A context shift moves cached keys with delta < 0.
  void shift_angles(std::int64_t delta, float* cos, float* sin) const {
    for (std::size_t i = 0; i < inv_freq_.size(); ++i) {
      const double angle = static_cast<double>(delta) * inv_freq_[i];
      cos[i] = static_cast<float>(std::cos(angle));
      sin[i] = static_cast<float>(std::sin(angle));
    }
  }

 private:
  static void fail(const std::string& message) {
    throw Error(ErrorKind::invalid_argument, "RoPE: " + message);
  }

  void validate(const RopeConfig& config, std::int64_t head_dim) const {
    if (head_dim <= 0) fail("head dimension must be positive, got " + std::to_string(head_dim));
    if (config.rot_dims < 0 || config.rot_dims > head_dim)
      fail("rotary dimension count " + std::to_string(config.rot_dims) + " outside [0, " +
           std::to_string(head_dim) + "]");
    if (rot_dims_ % 2 != 0)
      fail("rotary dimension count must be even, got " + std::to_string(rot_dims_));
    if (!(config.theta > 1.0f) || !std::isfinite(config.theta))
      fail("base theta must be a finite number above 1");
    const RopeScaling& s = config.scaling;
    if (s.type != RopeScalingType::none && (!(s.factor > 0.0f) || !std::isfinite(s.factor)))
      fail(std::string("scaling factor must be positive for ") + to_string(s.type) + " scaling");
    if ((s.type == RopeScalingType::yarn || s.type == RopeScalingType::llama3) &&
        s.original_context <= 0)
      fail(std::string(to_string(s.type)) + " scaling needs the original context length");
    if (s.type == RopeScalingType::ntk && rot_dims_ <= 2)
      fail("NTK scaling needs more than 2 rotated dimensions");
    if (s.type == RopeScalingType::llama3 && !(s.high_freq_factor > s.low_freq_factor))
      fail("llama3 scaling needs high_freq_factor > low_freq_factor");
    if (!config.freq_factors.empty() && config.freq_factors.size() != rot_dims_ / 2)
      fail("rope_freqs has " + std::to_string(config.freq_factors.size()) +
           " entries, expected rot_dims/2 = " + std::to_string(rot_dims_ / 2));
    for (float f : config.freq_factors)
      if (!(f > 0.0f) || !std::isfinite(f)) fail("rope_freqs entries must be positive and finite");
  }

  void compute_frequencies(const RopeConfig& config) {
    const RopeScaling& s = config.scaling;
    const double d = static_cast<double>(rot_dims_);
    double theta = config.theta;
    if (s.type == RopeScalingType::ntk)
      theta *= std::pow(static_cast<double>(s.factor), d / (d - 2));
    inv_freq_.resize(rot_dims_ / 2);
    for (std::size_t i = 0; i < inv_freq_.size(); ++i)
      inv_freq_[i] = 1.0 / std::pow(theta, 2.0 * static_cast<double>(i) / d);

    switch (s.type) {
      case RopeScalingType::none:
      case RopeScalingType::ntk: break;
      case RopeScalingType::linear:
        for (double& f : inv_freq_) f /= s.factor;
        break;
      case RopeScalingType::yarn: apply_yarn(s, theta); break;
      case RopeScalingType::llama3: apply_llama3(s); break;
    }
    for (std::size_t i = 0; i < config.freq_factors.size(); ++i)
      inv_freq_[i] /= config.freq_factors[i];
  }

  // YaRN: frequencies that complete fewer than beta_slow rotations over the original context
  // are interpolated (divided by factor), those completing more than beta_fast are kept, and
  // a linear ramp blends the band between. cos/sin get the attention temperature mscale.
  void apply_yarn(const RopeScaling& s, double theta) {
    const double d = static_cast<double>(rot_dims_);
    const double original = static_cast<double>(s.original_context);
    auto correction_dim = [&](double rotations) {
      return d * std::log(original / (rotations * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(theta));
    };
    double low = std::max(0.0, std::floor(correction_dim(s.beta_fast)));
    double high = std::min(d - 1.0, std::ceil(correction_dim(s.beta_slow)));
    if (low == high) high += 0.001;  // avoid a zero-width ramp
    for (std::size_t i = 0; i < inv_freq_.size(); ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      const double extrapolation_weight = 1.0 - ramp;
      const double extrapolated = inv_freq_[i];
      const double interpolated = inv_freq_[i] / s.factor;
      inv_freq_[i] =
          interpolated * (1.0 - extrapolation_weight) + extrapolated * extrapolation_weight;
    }
    mscale_ = s.attention_factor > 0.0f
                  ? s.attention_factor
                  : (s.factor > 1.0f ? static_cast<float>(0.1 * std::log(s.factor) + 1.0) : 1.0f);
  }

  // Llama 3.1: wavelengths longer than original/low_freq_factor are divided by factor, shorter
  // than original/high_freq_factor kept, and the band between blended smoothly.
  void apply_llama3(const RopeScaling& s) {
    const double original = static_cast<double>(s.original_context);
    const double low_wavelen = original / s.low_freq_factor;
    const double high_wavelen = original / s.high_freq_factor;
    for (double& f : inv_freq_) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f /= s.factor;
        continue;
      }
      const double smooth =
          (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1.0 - smooth) * f / s.factor + smooth * f;
    }
  }

  RopeLayout layout_;
  std::size_t head_dim_;
  std::size_t rot_dims_;
  std::vector<double> inv_freq_;
  float mscale_ = 1.0f;
};

}  // namespace hllm
