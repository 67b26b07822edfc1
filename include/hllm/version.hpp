#pragma once
// The library version; CMake's project() version and hllmConfigVersion.cmake agree with it.

namespace hllm {
inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 1;
inline constexpr int kVersionPatch = 0;
inline constexpr const char* kVersionString = "0.1.0";
}  // namespace hllm
