// The CLI's progress line: long commands (hf reshard, hf import, hf
// export, store verify, store rm, store gc, selftest) draw one updating
// line on standard error while a library operation reports its bytes (or
// keys, or a fraction) through a ProgressCallback (weight_store.h).
// Standard output (and so --json) is never written.

#ifndef RESHARD_TOOLS_PROGRESS_H_
#define RESHARD_TOOLS_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "reshard/weight_store.h"

namespace CLI {
class App;
}  // namespace CLI

namespace reshard::cli {

// --progress auto|always|never: auto draws when standard error is a
// terminal, always draws anyway (e.g. into a file or a test's pipe).
enum class ProgressMode { kAuto, kAlways, kNever };

// Adds --progress auto|always|never (default auto) to `cmd`.
void AddProgressOption(CLI::App* cmd, ProgressMode* mode);

// Whether `mode` draws here (auto: standard error is a terminal).
bool ProgressEnabled(ProgressMode mode);

// One operation's line on standard error:
//   "\r\x1b[K<what>  42.0%  1.21 GiB / 2.88 GiB  850.3 MiB/s  ETA 2s"
// redrawn at most ten times a second (and always at 100%), ended with a
// newline by Finish or the destructor once anything was drawn. Drawn only
// when ProgressEnabled(mode).
class ProgressLine {
 public:
  // `unit`: what Update counts ("" for bytes, shown as KiB/MiB/...; else
  // a noun such as "keys").
  ProgressLine(std::string what, ProgressMode mode, std::string unit = "");
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // A callback drawing this line (empty when the line is not drawn, so the
  // library does no progress work at all). The line must outlive it.
  ProgressCallback Callback();
  void Update(uint64_t done, uint64_t total);
  // Progress without a byte count: "<what>  42.0%  ETA 2s".
  void UpdateFraction(double fraction);
  // Ends the line (a newline) if anything was drawn.
  void Finish();

 private:
  void Draw(uint64_t done, uint64_t total);
  // The line's text after `what`: percentage, counts, rate, ETA.
  std::string Figures(double done, double total, bool counts) const;

  std::string what_;
  std::string unit_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1.21 GiB", "512 B": a byte count for people.
std::string HumanBytes(double bytes);

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_PROGRESS_H_
