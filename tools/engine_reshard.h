// `reshard engine reshard`: per-participant parameter files of one engine
// layout into those of another, through this process, two UCX processes
// or a weight store.

#ifndef RESHARD_TOOLS_ENGINE_RESHARD_H_
#define RESHARD_TOOLS_ENGINE_RESHARD_H_

#include <chrono>
#include <string>

#include "reshard/engine.h"

namespace reshard::cli {

struct EngineReshardArgs {
  std::string source_dir, target_dir;
  // "local", "ucx" or a weight store URI (fs://DIR, redis://...).
  std::string via = "local";
  uint32_t threads = 4;
  // Convert tensors whose dtype differs (local only).
  bool convert = false;
  // Take source files that carry no identity by their names (a file whose
  // identity differs from its participant's is refused either way).
  bool trust_file_names = false;
  Fp8Block block;
  // --via ucx: bounds each wait of the live session and the whole run
  // (both ranks are ended when it passes).
  std::chrono::milliseconds timeout{120000};
};

struct EngineReshardReport {
  uint64_t bytes = 0;          // target parameter bytes moved
  uint64_t padding_bytes = 0;  // target padding zero-filled
  uint64_t source_bytes = 0;   // source parameter bytes read from files
  uint64_t files = 0;          // target files written
  double seconds = 0;          // the move alone (files excluded)
  std::string manifest_key;    // --via STORE_URI: the uploaded revision
  std::string via;             // the path taken (EngineReshardArgs::via)
};

// Every field of `r`, names sorted (reshard/fields.h): what `engine
// reshard --json` prints; manifest_key only when the bytes went through a
// store.
template <typename Visit>
void VisitFields(const EngineReshardReport& r, Visit&& visit) {
  visit("bytes", r.bytes);
  visit("files", r.files);
  if (!r.manifest_key.empty()) visit("manifest_key", r.manifest_key);
  visit("padding_bytes", r.padding_bytes);
  visit("seconds", r.seconds);
  visit("source_bytes", r.source_bytes);
  visit("via", r.via);
}

// Reads every source participant's file, moves the bytes into every target
// participant's parameters and writes their files. Target files that
// exist are refused before anything is read.
Result<EngineReshardReport> RunEngineReshard(const EngineLayout& source,
                                             const EngineLayout& target,
                                             const EngineReshardArgs& args);

// Adds the participant's fragment bytes to `bytes` and its padding to
// `padding_bytes` (what --json reports as bytes and padding_bytes).
void CountPieceBytes(const EngineParticipant& participant, uint64_t* bytes,
                     uint64_t* padding_bytes);

// "<dir>/<participant id>.safetensors".
std::string ParameterFilePath(const std::string& dir,
                              const std::string& participant_id);

// Refuses when `dir` is not a directory (or missing with no directory to
// create it in), or when a file of `layout`'s participants (or only
// `participant_id`'s), or its ".partial", exists in it. Creates nothing.
Status CheckOutputDir(const std::string& dir, const EngineLayout& layout,
                      const std::string& participant_id = "");
// Creates `dir` when missing; `created`, when given, says whether it did.
Status CreateOutputDir(const std::string& dir, bool* created = nullptr);

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_ENGINE_RESHARD_H_
