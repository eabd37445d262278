// The reshard command-line tool: argument parsing plus public API calls.

#include <sys/stat.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cerrno>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

#include "contract/placement_wire.h"
#include "reshard/store_uri.h"
#include "tools/cli_common.h"
#include "tools/commands.h"
#include "util/canonical_json.h"
#include "util/file_io.h"
#include "util/printable.h"

namespace reshard::cli {

namespace {

constexpr char kPlacementCapVariable[] = "RESHARD_MAX_PLACEMENT_BYTES";

// The cap of placement-like inputs: the environment's, or the default.
Result<uint64_t> PlacementCap() {
  const char* text = std::getenv(kPlacementCapVariable);
  if (text == nullptr || *text == '\0') return kMaxPlacementBytes;
  uint64_t v = 0;
  const char* end = text + std::strlen(text);
  const auto [ptr, ec] = std::from_chars(text, end, v);
  if (ec != std::errc() || ptr != end || v == 0) {
    return Status::InvalidArgument(std::string(kPlacementCapVariable) +
                                   " must be a positive byte count, " +
                                   "not \"" + internal::Printable(text) + "\"");
  }
  return v;
}

}  // namespace

namespace {

// The cap of `kind` and the hint its error gives.
Status InputCap(InputKind kind, uint64_t* cap, std::string* hint) {
  switch (kind) {
    case InputKind::kPlacement: {
      RESHARD_ASSIGN_OR_RETURN(*cap, PlacementCap());
      *hint = std::string("the cap of placement inputs; ") +
              kPlacementCapVariable + " raises it";
      break;
    }
    case InputKind::kHfConfig:
      *cap = kMaxConfigBytes;
      *hint = "the cap of config.json files";
      break;
    case InputKind::kModelSpec:
      *cap = kMaxModelSpecBytes;
      *hint = "the cap of model specs";
      break;
  }
  return Status::OK();
}

}  // namespace

Result<std::string> ReadFile(const std::string& path, InputKind kind) {
  uint64_t cap = 0;
  std::string hint;
  RESHARD_RETURN_NOT_OK(InputCap(kind, &cap, &hint));
  if (path == "-") {
    return internal::ReadFdBounded(STDIN_FILENO, cap, "standard input", hint);
  }
  return internal::ReadFileBounded(path, cap, hint);
}

Status WriteOutput(std::string_view flag, const std::string& path,
                   std::string_view text) {
  if (path == "-") {
    std::cout << text;
    return Status::OK();
  }
  return internal::WriteOutputFile(flag, path, text);
}

namespace {

// Where an output lands, to tell two outputs apart: an existing file's
// device and inode (standard output's for "-"), and the path resolved
// (an existing file's real path, else its directory's real path and its
// name; the spelling itself where even the directory does not resolve).
struct OutputIdentity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string resolved;
};

// The directory and the name of `path` ("." for a bare name).
std::pair<std::string, std::string> SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

std::string RealPath(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) return {};
  std::string out = real;
  std::free(real);
  return out;
}

OutputIdentity IdentityOf(const std::string& path) {
  OutputIdentity id;
  struct stat sb;
  if (path == "-" ? ::fstat(STDOUT_FILENO, &sb) == 0
                  : ::stat(path.c_str(), &sb) == 0) {
    id.exists = true;
    id.dev = sb.st_dev;
    id.ino = sb.st_ino;
  }
  if (path == "-") {
    id.resolved = "-";
  } else if (id.exists) {
    id.resolved = RealPath(path);
  } else {
    const auto [dir, name] = SplitPath(path);
    const std::string real = RealPath(dir);
    id.resolved = real.empty() ? path : real + "/" + name;
  }
  return id;
}

bool SameOutput(const OutputIdentity& a, const OutputIdentity& b) {
  return (a.exists && b.exists && a.dev == b.dev && a.ino == b.ino) ||
         (!a.resolved.empty() && a.resolved == b.resolved);
}

// Whether directory `dir` takes a new file: one is made and removed.
Status CheckNewFileIn(const std::string& where, const std::string& dir) {
  std::string probe = dir + "/.reshard-output-check-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    return Status::IOError(where + ": cannot write: " + std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::OK();
}

// What WriteOutput would refuse about `path` before writing a byte
// (internal::ResolveOutputFile's refusals, and a directory that takes no
// new file); sets `*stream` for what is written directly (standard
// output, a character device, a FIFO).
Status CheckOutputPath(const CommandOutput& o, bool* stream) {
  *stream = o.path == "-";
  if (*stream) return Status::OK();
  RESHARD_ASSIGN_OR_RETURN(internal::OutputTarget out,
                           internal::ResolveOutputFile(o.flag, o.path));
  *stream = out.kind == internal::OutputTarget::Kind::kDirect;
  if (*stream) return Status::OK();
  return CheckNewFileIn(out.where, SplitPath(out.file).first);
}

}  // namespace

Status WriteOutputs(const std::vector<CommandOutput>& outputs) {
  std::vector<OutputIdentity> ids;
  for (const CommandOutput& o : outputs) ids.push_back(IdentityOf(o.path));
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (SameOutput(ids[i], ids[j])) {
        return Status::InvalidArgument(
            outputs[j].flag + " " + internal::Printable(outputs[j].path) +
            " and " + outputs[i].flag + " " +
            internal::Printable(outputs[i].path) + " name the same file");
      }
    }
  }
  std::vector<const CommandOutput*> streams, files;
  for (const CommandOutput& o : outputs) {
    bool stream = false;
    RESHARD_RETURN_NOT_OK(CheckOutputPath(o, &stream));
    (stream ? streams : files).push_back(&o);
  }
  for (const auto* group : {&streams, &files}) {
    for (const CommandOutput* o : *group) {
      RESHARD_RETURN_NOT_OK(WriteOutput(o->flag, o->path, o->text));
    }
  }
  return Status::OK();
}

Result<InputText> InputText::Open(const std::string& path, InputKind kind) {
  InputText in;
  if (path != "-") {
    uint64_t cap = 0;
    std::string hint;
    RESHARD_RETURN_NOT_OK(InputCap(kind, &cap, &hint));
    in.mapped_ = internal::MappedFile::Open(path, kMapInputBytes, cap);
    if (in.mapped_.mapped()) return in;
  }
  RESHARD_ASSIGN_OR_RETURN(in.read_, ReadFile(path, kind));
  return in;
}

Result<WeightPlacementManifest> DecodePlacement(const InputText& input) {
  if (input.mapped()) {
    return internal::PlacementDecoder::FromMappedJson(input.text());
  }
  return WeightPlacementFromJson(input.text());
}

Result<WeightPlacementManifest> LoadPlacement(const std::string& path) {
  RESHARD_ASSIGN_OR_RETURN(InputText input,
                           InputText::Open(path, InputKind::kPlacement));
  if (input.mapped()) {
    auto m = DecodePlacement(input);
    if (!m.ok()) return m.status().WithContext(path);
    return m;
  }
  std::string text = std::move(input).TakeRead();
  // The text's pages go back as its parts are decoded: a regular file can
  // be read again should the general decoder need it; standard input, a
  // pipe or a device cannot.
  std::function<Result<std::string>()> reread;
  struct stat st;
  if (path != "-" && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    reread = [&path] { return ReadFile(path, InputKind::kPlacement); };
  }
  auto m = internal::PlacementDecoder::FromOwnedJson(std::move(text), reread);
  if (!m.ok()) return m.status().WithContext(path);
  return m;
}

Result<WeightStore> OpenExistingStore(const std::string& uri,
                                      WeightStoreOptions options) {
  RESHARD_ASSIGN_OR_RETURN(std::unique_ptr<ObjectStore> backend,
                           OpenObjectStore(uri, {.create_if_missing = false}));
  return WeightStore::Open(std::shared_ptr<ObjectStore>(std::move(backend)),
                           std::move(options));
}

void AddGridOptions(CLI::App* cmd, ParallelSizes* sizes) {
  cmd->add_option("--tp", sizes->tp, "tensor-parallel size");
  cmd->add_option("--pp", sizes->pp, "pipeline-parallel size");
  cmd->add_option("--ep", sizes->ep, "expert-parallel size");
  cmd->add_option("--dp", sizes->dp, "data-parallel size");
}

void AddBlockOption(CLI::App* cmd, Fp8Block* block, const std::string& name) {
  cmd->add_option_function<std::string>(
         name,
         [block, name](const std::string& text) {
           int64_t rows = 0, cols = 0;
           char x = 0, rest = 0;
           if (std::sscanf(text.c_str(), "%" SCNd64 "%c%" SCNd64 "%c", &rows,
                           &x, &cols, &rest) != 3 ||
               x != 'x' || rows < 1 || cols < 1 || rows > (int64_t{1} << 30) ||
               cols > (int64_t{1} << 30)) {
             throw CLI::ValidationError(
                 name,
                 "must be ROWSxCOLS with positive integers (e.g. "
                 "128x128), not '" +
                     text + "'");
           }
           *block = {rows, cols};
         },
         "FP8 block ROWSxCOLS (default 128x128)")
      ->type_name("BNxBK");
}

void AddFormOptions(CLI::App* cmd, std::string* quantize, Fp8Block* block,
                    std::string* dtype) {
  auto* q = cmd->add_option("--quantize", *quantize,
                            "fp8: the FP8 form of a float model (linear "
                            "weights block-quantized, with their scales)")
                ->check(CLI::IsMember({"fp8"}));
  auto* d = cmd->add_option("--dtype", *dtype,
                            "every float tensor in this dtype, no scales")
                ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  q->excludes(d);
  AddBlockOption(cmd, block);
}

std::optional<double> ParseFiniteNumber(std::string_view text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

Result<double> NumberFlag(std::string_view flag, std::string_view text,
                          double lo, double hi, std::string_view what) {
  const std::optional<double> v = ParseFiniteNumber(text);
  if (!v || *v < lo || *v > hi) {
    return Status::InvalidArgument(std::string(flag) + " must be " +
                                   std::string(what) + ", not '" +
                                   internal::Printable(text) + "'");
  }
  return *v;
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}

void KeySeconds(internal::CanonicalJsonWriter* w, const char* key,
                double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6f", value);
  w->Key(key);
  w->Raw(buf);
}

int Fail(const Status& status) {
  std::cerr << "reshard: error: " << status.message() << "\n";
  return 1;
}

int FinishStandardOutput(int code) {
  // Every subcommand writes standard output through std::cout (synced with
  // stdio, so through stdout's buffer) or stdio; both are flushed here and a
  // failure anywhere (a full disk, a closed pipe) turns a success into exit
  // code 1. The first errno seen names the reason.
  errno = 0;
  std::cout.flush();
  int err = errno;
  const bool stream_failed = !std::cout.good();
  errno = 0;
  const bool flush_failed = std::fflush(stdout) != 0 || std::ferror(stdout);
  if (err == 0) err = errno;
  if (!stream_failed && !flush_failed) return code;
  std::clearerr(stdout);
  std::cout.clear();
  std::cerr << "reshard: error: writing to standard output: "
            << (err != 0 ? std::strerror(err) : "write failed") << "\n";
  return code == 0 ? 1 : code;
}

}  // namespace reshard::cli

int main(int argc, char** argv) {
#ifdef __GLIBC__
  // glibc raises its mmap threshold as large blocks are freed, after which
  // tables of tens of MB come from the heap and stay resident once freed.
  // A fixed threshold keeps every block from 4 MiB up in a mapping of its
  // own, returned when freed: measured 17 MB less peak RSS for the Kimi-K2
  // plan, the same time.
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
#endif
  // Large inputs are mapped (cli_common.h, InputText).
  reshard::internal::ExitOnBusError(
      "reshard: error: bus error (SIGBUS) reading a mapped file: an input "
      "shrank while it was being read, or a memory-backed file ran out of "
      "space (inputs must not change while reshard runs)");
  CLI::App app{
      "reshard: move model weights between parallel layouts, exactly."};
  app.require_subcommand(1);
  // Usage errors are one line like every other error, with the offending
  // argument escaped (set before the subcommands, which copy it).
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "reshard: error: " + reshard::internal::Printable(e.what(), 1024) +
           " (run with --help for usage)\n";
  });
  reshard::cli::AddValidateCommand(app);
  reshard::cli::AddCanonicalizeCommand(app);
  reshard::cli::AddPlanCommand(app);
  reshard::cli::AddGenCommand(app);
  reshard::cli::AddSelftestCommand(app);
  reshard::cli::AddImportLegacyCommand(app);
  reshard::cli::AddStoreCommand(app);
  reshard::cli::AddDemoCommand(app);
  reshard::cli::AddHfCommand(app);
  reshard::cli::AddEngineCommand(app);
  reshard::cli::AddInfoCommand(app);
  int code = 0;
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    code = e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    code = app.exit(e);
  }
  return reshard::cli::FinishStandardOutput(code);
}
