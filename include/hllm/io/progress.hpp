#pragma once
// Progress of the library's long operations, for a program to show: conversion and
// quantization (convert_model), and the slow parts of loading (LoadOptions::progress: the
// NaN/Inf scan and the load-time repack of a large file, which reads every page of it). These
// take seconds to minutes on a 7B model, and a program that shows nothing meanwhile looks hung.
// The library only reports; drawing (a redrawn line on a terminal, plain lines in a log) is the
// program's business (examples/common/progress.hpp).
//
// The callback runs once per tensor, after that tensor is done, on the thread that called the
// operation (never inside a thread-pool job, so it needs no locks), and costs one branch when
// unset. It may throw to cancel: the operation then throws that exception and leaves what it was
// given as it was.

#include <cstddef>
#include <functional>
#include <string_view>

namespace hllm {

struct Progress {
  std::string_view stage;  // what is being done: "converting", "quantizing", "checking", ...
  std::size_t done = 0;    // tensors of this stage finished, 1 .. total
  std::size_t total = 0;   // tensors of this stage
  std::string_view item;   // the tensor just finished (its GGUF name)
};
// The views in a Progress are valid during the call only.
using ProgressCallback = std::function<void(const Progress&)>;

namespace detail {

inline void report_progress(const ProgressCallback& progress, std::string_view stage,
                            std::size_t done, std::size_t total, std::string_view item) {
  if (progress) progress(Progress{stage, done, total, item});
}

}  // namespace detail

}  // namespace hllm
