// Shared helpers of the reshard CLI subcommands.

#ifndef RESHARD_TOOLS_CLI_COMMON_H_
#define RESHARD_TOOLS_CLI_COMMON_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "reshard/conversion.h"
#include "reshard/placement.h"
#include "reshard/status.h"
#include "reshard/weight_store.h"
#include "tools/record_json.h"
#include "util/canonical_json.h"
#include "util/mapped_file.h"

namespace CLI {
class App;
}  // namespace CLI

namespace reshard::internal {
class CanonicalJsonWriter;
}  // namespace reshard::internal

namespace reshard::cli {

// Hands `value` to the process for the rest of its life: it is never
// destroyed, and the kernel reclaims its memory at exit. One-shot commands
// keep their decoded manifests and plans this way, whose destruction
// (millions of small frees: 0.1 s for the Kimi-K2 pair) would buy nothing.
// The objects stay reachable, so leak checkers do not report them.
template <typename T>
void KeepUntilExit(T&& value) {
  static auto* kept = new std::vector<std::shared_ptr<void>>();  // never freed
  kept->push_back(std::make_shared<std::decay_t<T>>(std::forward<T>(value)));
}

// What an input file holds. Each kind has a size cap (docs/reliability.md,
// "Input caps"); reading stops there with an error naming the file.
enum class InputKind {
  // Placements, bindings, stored manifests, legacy inventories, any JSON
  // to canonicalize: kMaxPlacementBytes (4 GiB), or the environment's
  // RESHARD_MAX_PLACEMENT_BYTES (a byte count) where a placement is larger.
  kPlacement,
  // A Hugging Face config.json: kMaxConfigBytes (64 MiB).
  kHfConfig,
  // A model spec of `gen --model`: kMaxModelSpecBytes (64 MiB).
  kModelSpec,
};
inline constexpr uint64_t kMaxPlacementBytes = uint64_t{4} << 30;
inline constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxModelSpecBytes = uint64_t{64} << 20;

// Reads a whole file ("-" is standard input) of at most the kind's cap; a
// larger one (a regular file by its size, anything else by reading one byte
// past the cap) is InvalidArgument "<path> is larger than N bytes (...)".
// A malformed RESHARD_MAX_PLACEMENT_BYTES is InvalidArgument naming it.
Result<std::string> ReadFile(const std::string& path, InputKind kind);

// Writes `text` to the output `path` of option `flag` ("-" is standard
// output) by internal::WriteOutputFile's rules: only a regular file (or
// nothing) is ever replaced, through a new file renamed over it; a
// character device or FIFO is written directly; a failed write leaves the
// path as it was.
Status WriteOutput(std::string_view flag, const std::string& path,
                   std::string_view text);

// One output of a command: its flag, its path ("-" is standard output)
// and its bytes.
struct CommandOutput {
  std::string flag;
  std::string path;
  std::string text;
};

// Writes every output of a command or none. First each path is checked as
// WriteOutput will treat it (a new or regular file needs a directory that
// takes a new file; a directory, a block device, a socket or a link to
// nothing is refused, each with WriteOutput's message), and two outputs
// naming one file are refused naming both flags: the same spelling, two
// spellings or symbolic links of one path, one existing file (device and
// inode; "-" is standard output's), standard output twice. Then each is
// written with WriteOutput, devices and FIFOs (and standard output) before
// regular files. Only what cannot be known without writing (a FIFO's
// reader, a full disk) can still fail after an earlier output was written.
Status WriteOutputs(const std::vector<CommandOutput>& outputs);

// A large input file's text: mapped where it is a regular file of
// kMapInputBytes or more (no copy, no fresh pages: internal::MappedFile;
// main installs the SIGBUS exit for a file truncated meanwhile), else read
// with ReadFile. Errors and caps are ReadFile's.
inline constexpr uint64_t kMapInputBytes = uint64_t{4} << 20;
class InputText {
 public:
  static Result<InputText> Open(const std::string& path, InputKind kind);
  bool mapped() const { return mapped_.mapped(); }
  std::string_view text() const {
    return mapped() ? mapped_.view() : std::string_view(read_);
  }
  // The text read (empty when mapped).
  std::string TakeRead() && { return std::move(read_); }

 private:
  internal::MappedFile mapped_;
  std::string read_;
};

// Decodes a placement from `input` (a mapped one through
// internal::PlacementDecoder::FromMappedJson, its pages given back as it is
// decoded).
Result<WeightPlacementManifest> DecodePlacement(const InputText& input);

// Reads and decodes a placement file; errors name the file.
Result<WeightPlacementManifest> LoadPlacement(const std::string& path);

// Opens the existing weight store `uri` for a command that must not
// create one (ls, show, verify, rm, gc, hf export): a store directory that
// does not exist is NotFound "store directory PATH does not exist" and
// nothing is created.
Result<WeightStore> OpenExistingStore(const std::string& uri,
                                      WeightStoreOptions options = {});

// The grid flags --tp, --pp, --ep and --dp of a layout command, into
// `sizes`.
void AddGridOptions(CLI::App* cmd, ParallelSizes* sizes);

// --block BNxBK (positive integers, default 128x128): the FP8 block of a
// quantizing layout or a conversion.
void AddBlockOption(CLI::App* cmd, Fp8Block* block,
                    const std::string& name = "--block");

// --quantize fp8 and --dtype float32|bfloat16|float16 (excluding each
// other) and --block: the form a layout asks for.
void AddFormOptions(CLI::App* cmd, std::string* quantize, Fp8Block* block,
                    std::string* dtype);

// The text of a floating-point flag as a number: the whole text one
// finite decimal number (std::from_chars' general form: an optional '-',
// digits with an optional point, an optional exponent), else nullopt:
// empty text, spaces, a '+', hexadecimal, "nan", "inf", a magnitude past
// double's range.
std::optional<double> ParseFiniteNumber(std::string_view text);

// The value of floating-point flag `flag` given as `text`: a finite number
// (ParseFiniteNumber) from `lo` to `hi`, else InvalidArgument "<flag> must
// be <what>, not '<text>'" (the text escaped as internal::Printable does).
// Every floating-point flag is taken as text and checked here (--timeout,
// --change-fraction, --gbps): a parser's own conversion would take '' as 0
// and "nan" as a number.
Result<double> NumberFlag(std::string_view flag, std::string_view text,
                          double lo, double hi, std::string_view what);

// Seconds since `t` on the steady clock.
double SecondsSince(std::chrono::steady_clock::time_point t);

// `key`: `value` with six decimals, written raw (a --json time).
void KeySeconds(internal::CanonicalJsonWriter* w, const char* key,
                double value);

// Prints "reshard: error: <message>" to stderr and returns exit code 1.
int Fail(const Status& status);

// Flushes standard output and returns `code`, or 1 with "reshard: error:
// writing to standard output: <reason>" on stderr when any write to it
// failed (a full disk, a closed pipe): no command reports success for
// output that did not arrive. Called once, by main.
int FinishStandardOutput(int code);

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_CLI_COMMON_H_
