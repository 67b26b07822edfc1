#pragma once
// The example programs' progress display for long work (conversion, the slow parts of loading,
// each benchmark test), as llama.cpp's tools show theirs. It writes to stderr, so stdout keeps
// only the program's data (text, tables, JSON) and can be piped.
//
// On a terminal it is one line, redrawn in place with '\r' and ended with a newline when the
// stage completes:
//   quantizing  37/201 blk.4.ffn_up.weight
// Anywhere else (a pipe, a log file, CI) a redrawn line would arrive as one long line full of
// carriage returns, so it writes plain lines instead: one per update, or one per tenth of the
// stage, as each program chooses. --log-disable makes it print nothing.
//
// The library reports through hllm::ProgressCallback (hllm/io/progress.hpp) on the calling
// thread, so none of this needs a lock.

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "hllm/io/progress.hpp"

namespace hllm::examples {

class ProgressPrinter {
 public:
  // Away from a terminal: a line for every update, or one per tenth of a stage (and its last).
  enum class Lines { every, tenths };
  struct Options {
    bool enabled = true;  // false: prints nothing (--log-disable)
    Lines lines = Lines::every;
    // A stage shows nothing until it has run this long, so that a load of milliseconds adds no
    // lines; a stage that ends sooner shows nothing at all.
    double delay_s = 0.0;
    std::optional<bool> terminal;  // whether `out` is one; unset: isatty (tests set it)
  };

  explicit ProgressPrinter(Options options, std::FILE* out = stderr)
      : options_(options), out_(out), stage_start_(Clock::now()) {
    terminal_ = options_.terminal.value_or(::isatty(::fileno(out_)) == 1);
    if (terminal_) {
      winsize size{};
      if (::ioctl(::fileno(out_), TIOCGWINSZ, &size) == 0 && size.ws_col > 1)
        width_ = size.ws_col - 1u;  // the last column would make some terminals wrap
    }
  }
  ~ProgressPrinter() { finish(); }
  ProgressPrinter(const ProgressPrinter&) = delete;
  ProgressPrinter& operator=(const ProgressPrinter&) = delete;

  // One report of the library's: "STAGE DONE/TOTAL ITEM", DONE padded to TOTAL's width.
  void update(const Progress& p) {
    if (!options_.enabled) return;
    const Clock::time_point now = Clock::now();
    if (p.stage != stage_) {  // a new stage: close the last one's line
      finish();
      stage_.assign(p.stage);
      shown_ = false;
      tenth_ = 0;
    }
    const bool last = p.done >= p.total;
    if (!shown_ && seconds(stage_start_, now) < options_.delay_s) {
      if (last) stage_start_ = now;  // the next stage's clock starts here
      return;
    }
    const std::size_t tenth = p.total > 0 ? p.done * 10 / p.total : 10;
    bool draw = true;
    if (terminal_)  // a redraw per 50 ms is smooth, and spares a slow (remote) terminal
      draw = last || !open_ || seconds(drawn_at_, now) >= 0.05;
    else if (options_.lines == Lines::tenths)
      draw = last || !shown_ || tenth > tenth_;
    if (draw) {
      const std::string total = std::to_string(p.total);
      std::string done = std::to_string(p.done);
      if (done.size() < total.size()) done.insert(0, total.size() - done.size(), ' ');
      std::string text = stage_ + " " + done + "/" + total;
      if (!p.item.empty()) text += " " + std::string(p.item);
      show(text);
      tenth_ = tenth;
      drawn_at_ = now;
    }
    if (last) {
      finish();
      stage_start_ = now;
    }
  }

  // A free-form status that replaces the last one ("[1/2] pp512 q4_0 t=2: run 1/3"): redrawn on
  // a terminal, a line of its own elsewhere.
  void status(std::string_view text) {
    if (!options_.enabled) return;
    show(std::string(text));
  }

  // Ends a line being redrawn with a newline (the next output starts on a line of its own).
  void finish() {
    if (open_) std::fputc('\n', out_);
    std::fflush(out_);
    open_ = false;
    drawn_ = 0;
  }

  bool terminal() const noexcept { return terminal_; }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  }

  void show(std::string text) {
    shown_ = true;
    if (!terminal_) {
      std::fprintf(out_, "%s\n", text.c_str());
      std::fflush(out_);
      return;
    }
    if (width_ > 0 && text.size() > width_)
      text.resize(width_);  // a wrapped line cannot be redrawn
    const std::size_t length = text.size();
    if (length < drawn_) text.append(drawn_ - length, ' ');  // cover the longer line before
    std::fprintf(out_, "\r%s", text.c_str());
    std::fflush(out_);
    drawn_ = length;
    open_ = true;
  }

  Options options_;
  std::FILE* out_;
  bool terminal_ = false;
  std::size_t width_ = 0;  // columns, where known
  std::string stage_;
  bool shown_ = false;     // something of this stage (or a status) was printed
  bool open_ = false;      // a terminal line is being redrawn (no newline yet)
  std::size_t drawn_ = 0;  // its length
  std::size_t tenth_ = 0;  // the tenth of the stage last printed
  Clock::time_point stage_start_, drawn_at_{};
};

// A callback that owns its printer, for a library options field filled in one expression
// (`{.progress = progress_callback({...})}`); the printer ends its line when the last copy of
// the callback is destroyed, also when the operation throws.
inline ProgressCallback progress_callback(ProgressPrinter::Options options) {
  if (!options.enabled) return {};  // unset: the library skips even building the report
  auto printer = std::make_shared<ProgressPrinter>(options);
  return [printer](const Progress& p) { printer->update(p); };
}

// What the programs show while loading a model: a line per tenth of each slow stage (repacking,
// the finite check) away from a terminal, and only for a stage that runs over half a second.
inline ProgressCallback load_progress(bool enabled) {
  return progress_callback(
      {.enabled = enabled, .lines = ProgressPrinter::Lines::tenths, .delay_s = 0.5});
}

}  // namespace hllm::examples
