#include "tools/progress.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>

namespace reshard::cli {

using Clock = std::chrono::steady_clock;

// Redraws at most this often (the last one, at 100%, always).
constexpr std::chrono::milliseconds kRedrawInterval{100};

void AddProgressOption(CLI::App* cmd, ProgressMode* mode) {
  const std::map<std::string, ProgressMode> modes = {
      {"auto", ProgressMode::kAuto},
      {"always", ProgressMode::kAlways},
      {"never", ProgressMode::kNever}};
  cmd->add_option("--progress", *mode,
                  "progress line on stderr: auto (when stderr is a "
                  "terminal), always or never (default auto)")
      ->transform(CLI::CheckedTransformer(modes, CLI::ignore_case));
}

bool ProgressEnabled(ProgressMode mode) {
  switch (mode) {
    case ProgressMode::kAlways:
      return true;
    case ProgressMode::kNever:
      return false;
    case ProgressMode::kAuto:
      break;
  }
  return ::isatty(STDERR_FILENO) == 1;
}

std::string HumanBytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t unit = 0;
  while (bytes >= 1024 && unit + 1 < std::size(kUnits)) {
    bytes /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f %s", bytes, kUnits[unit]);
  }
  return buf;
}

ProgressLine::ProgressLine(std::string what, ProgressMode mode,
                           std::string unit)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      enabled_(ProgressEnabled(mode)),
      start_(Clock::now()) {}

ProgressLine::~ProgressLine() { Finish(); }

ProgressCallback ProgressLine::Callback() {
  if (!enabled_) return {};
  return [this](uint64_t done, uint64_t total) { Update(done, total); };
}

void ProgressLine::Update(uint64_t done, uint64_t total) {
  if (!enabled_) return;
  const auto now = Clock::now();
  if (drawn_ && done < total && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  Draw(done, total);
}

void ProgressLine::UpdateFraction(double fraction) {
  if (!enabled_) return;
  fraction = std::clamp(fraction, 0.0, 1.0);
  const auto now = Clock::now();
  if (drawn_ && fraction < 1.0 && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  std::fputs(("\r\x1b[K" + what_ + Figures(fraction, 1.0, false)).c_str(),
             stderr);
  drawn_ = true;
  // A fraction's line is done at 100%: ended here, as its process may end
  // without destructors (a self-test's rank).
  if (fraction >= 1.0) Finish();
  std::fflush(stderr);
}

std::string ProgressLine::Figures(double done, double total,
                                  bool counts) const {
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start_).count();
  const double percent = total == 0 ? 100.0 : 100.0 * done / total;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "  %5.1f%%", percent);
  std::string line = buf;
  const auto amount = [&](double v) {
    if (unit_.empty()) return HumanBytes(v);
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return std::string(buf);
  };
  if (counts) {
    line += "  " + amount(done) + " / " + amount(total);
    if (!unit_.empty()) line += " " + unit_;
  }
  if (seconds > 0 && done > 0) {
    const double rate = done / seconds;
    if (counts) {
      line += "  " + amount(rate) + (unit_.empty() ? "/s" : " " + unit_ + "/s");
    }
    if (done < total) {
      std::snprintf(buf, sizeof(buf), "  ETA %.0fs", (total - done) / rate);
      line += buf;
    }
  }
  return line + "  ";
}

void ProgressLine::Draw(uint64_t done, uint64_t total) {
  const std::string line =
      "\r\x1b[K" + what_ +
      Figures(static_cast<double>(done), static_cast<double>(total), true);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::Finish() {
  if (!drawn_) return;
  std::fputc('\n', stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace reshard::cli
