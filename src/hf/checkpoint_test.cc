// HfCheckpoint::Open, LoadCheckpoint and the checkpoint writer on files
// the tests make.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "reshard/hf.h"
#include "selftest/host_buffers.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;
using ::reshard::testing::TempDir;
using ::testing::HasSubstr;

struct Spec {
  std::string name, dtype;
  Dims shape;
};

// Byte i of tensor `name`: a function of the name and the byte index.
uint8_t PatternByte(const std::string& name, uint64_t i) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return static_cast<uint8_t>((i * 2654435761ull + h) >> 7);
}

uint64_t Bytes(const Spec& s) {
  uint64_t n = static_cast<uint64_t>(FindSafetensorsDtype(s.dtype)->itemsize);
  for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string ShapeJson(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    s += (i ? "," : "") + std::to_string(d[i]);
  }
  return s + "]";
}

// A safetensors file of `specs` (in this order; pattern bytes).
std::string Encode(const std::vector<Spec>& specs) {
  std::string json = "{";
  uint64_t at = 0;
  for (const Spec& s : specs) {
    if (json.size() > 1) json += ",";
    json += "\"" + s.name + "\":{\"dtype\":\"" + s.dtype +
            "\",\"shape\":" + ShapeJson(s.shape) + ",\"data_offsets\":[" +
            std::to_string(at) + "," + std::to_string(at + Bytes(s)) + "]}";
    at += Bytes(s);
  }
  json += "}";
  while ((8 + json.size()) % 8 != 0) json += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) {
    out[static_cast<size_t>(i)] = char(uint64_t{json.size()} >> (8 * i));
  }
  out += json;
  for (const Spec& s : specs) {
    for (uint64_t i = 0; i < Bytes(s); ++i) out += char(PatternByte(s.name, i));
  }
  return out;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// Every dtype the format has, a 2-D tensor each, over two files with an
// index.
std::vector<Spec> AllDtypes() {
  return {{"t.bf16", "BF16", {4, 6}},    {"t.f16", "F16", {4, 6}},
          {"t.f32", "F32", {4, 6}},      {"t.f64", "F64", {4, 2}},
          {"t.e4m3", "F8_E4M3", {8, 8}}, {"t.e5m2", "F8_E5M2", {8, 4}},
          {"t.i8", "I8", {4, 8}},        {"t.i16", "I16", {4, 6}},
          {"t.i32", "I32", {2, 6}},      {"t.i64", "I64", {2, 4}},
          {"t.u8", "U8", {6, 8}},        {"t.bool", "BOOL", {2, 8}}};
}

std::string MakeCheckpoint(const std::string& dir,
                           const std::vector<Spec>& specs) {
  std::vector<Spec> a, b;
  for (size_t i = 0; i < specs.size(); ++i) (i % 2 ? b : a).push_back(specs[i]);
  // Larger items first keeps every tensor aligned.
  auto by_size = [](const Spec& x, const Spec& y) {
    return FindSafetensorsDtype(x.dtype)->itemsize >
           FindSafetensorsDtype(y.dtype)->itemsize;
  };
  std::stable_sort(a.begin(), a.end(), by_size);
  std::stable_sort(b.begin(), b.end(), by_size);
  WriteFile(dir + "/a.safetensors", Encode(a));
  WriteFile(dir + "/b.safetensors", Encode(b));
  std::string index = "{\"metadata\":{},\"weight_map\":{";
  for (size_t i = 0; i < specs.size(); ++i) {
    index += (i ? "," : "") + std::string("\"") + specs[i].name + "\":\"" +
             (i % 2 ? "b" : "a") + ".safetensors\"";
  }
  WriteFile(dir + "/model.safetensors.index.json", index + "}}");
  return dir;
}

// Each tensor split over TP 2 on its dimension `dim`.
WeightPlacementManifest TpLayout(const std::vector<Spec>& specs, int64_t dim,
                                 int64_t dp = 1) {
  auto draft = testing::GridDraft({.dp = dp, .tp = 2});
  for (const Spec& s : specs) {
    const SafetensorsDtype* d = FindSafetensorsDtype(s.dtype);
    testing::TensorLayout l;
    l.tensor_id = s.name;
    l.shape = s.shape;
    l.dtype = std::string(d->placement);
    l.itemsize = d->itemsize;
    l.tp_dim = dim;
    testing::AddTensor(&draft, l);
  }
  return Must(draft.Build());
}

// Checks every byte of every bound fragment against the pattern.
void ExpectPattern(const WeightPlacementManifest& m,
                   const internal::HostBuffers& buffers) {
  for (const PlacementFragment* f : m.fragments()) {
    auto it = buffers.data.find(f->placement_fragment_id());
    if (it == buffers.data.end()) continue;
    const TensorDescriptor& t = *m.FindTensor(f->tensor_id());
    const Dims& g = t.global_shape();
    const Dims& l = f->local_shape();
    const uint64_t item = static_cast<uint64_t>(t.itemsize());
    // 2-D boxes: local (r, c) is global (r + o0, c + o1).
    for (int64_t r = 0; r < l[0]; ++r) {
      for (uint64_t c = 0; c < static_cast<uint64_t>(l[1]) * item; ++c) {
        const uint64_t global =
            static_cast<uint64_t>(r + f->global_offset()[0]) * g[1] * item +
            static_cast<uint64_t>(f->global_offset()[1]) * item + c;
        const uint8_t got = it->second[r * l[1] * item + c];
        ASSERT_EQ(got, PatternByte(t.tensor_id(), global))
            << t.tensor_id() << " fragment " << f->placement_fragment_id()
            << " byte " << global;
      }
    }
  }
}

TEST(HfCheckpointTest, OpensThroughTheIndex) {
  TempDir dir("hf-open");
  const auto specs = AllDtypes();
  MakeCheckpoint(dir.path(), specs);
  ASSERT_OK_AND_ASSIGN(auto ckpt, HfCheckpoint::Open(dir.path()));
  ASSERT_EQ(ckpt.files().size(), 2u);
  EXPECT_EQ(ckpt.files()[0].name, "a.safetensors");
  ASSERT_EQ(ckpt.tensors().size(), specs.size());
  uint64_t total = 0;
  for (const Spec& s : specs) total += Bytes(s);
  EXPECT_EQ(ckpt.tensor_bytes(), total);
  const CheckpointTensor* t = ckpt.FindTensor("t.e4m3");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->file, "a.safetensors");
  EXPECT_EQ(t->dtype, "float8_e4m3fn");
  EXPECT_EQ(t->shape, (Dims{8, 8}));
  EXPECT_EQ(ckpt.FindTensor("nope"), nullptr);
}

TEST(HfCheckpointTest, LoadsEveryDtypeIntoBothSplitsReadingEachByteOnce) {
  TempDir dir("hf-load");
  const auto specs = AllDtypes();
  auto ckpt = Must(HfCheckpoint::Open(MakeCheckpoint(dir.path(), specs)));
  for (int64_t dim : {0, 1}) {
    const auto target = TpLayout(specs, dim);
    auto buffers = Must(internal::AllocateHostBuffers(target, "t"));
    ASSERT_OK_AND_ASSIGN(auto report,
                         LoadCheckpoint(ckpt, target, buffers.bindings));
    EXPECT_EQ(report.bytes, ckpt.tensor_bytes());
    EXPECT_EQ(report.bytes_read, ckpt.tensor_bytes()) << "dim " << dim;
    ExpectPattern(target, buffers);
  }
}

TEST(HfCheckpointTest, ReplicasAreReadOnceAndCopied) {
  TempDir dir("hf-dp");
  const std::vector<Spec> specs = {{"w", "BF16", {64, 32}}};
  auto ckpt = Must(HfCheckpoint::Open(MakeCheckpoint(dir.path(), specs)));
  const auto target = TpLayout(specs, 0, /*dp=*/2);
  auto buffers = Must(internal::AllocateHostBuffers(target, "t"));
  ASSERT_OK_AND_ASSIGN(auto report,
                       LoadCheckpoint(ckpt, target, buffers.bindings));
  EXPECT_EQ(report.bytes, 2 * ckpt.tensor_bytes());
  EXPECT_EQ(report.bytes_read, ckpt.tensor_bytes());
  ExpectPattern(target, buffers);
}

TEST(HfCheckpointTest, OneRankReadsOnlyItsRowsWhenTheGapsAreLarge) {
  TempDir dir("hf-rank");
  // Rows of 256 KiB: a TP2 dim-1 shard needs 128 KiB of each, leaving
  // gaps of 128 KiB, above the 64 KiB gap limit.
  const std::vector<Spec> specs = {{"w", "U8", {16, 256 << 10}}};
  auto ckpt = Must(HfCheckpoint::Open(MakeCheckpoint(dir.path(), specs)));
  const auto target = TpLayout(specs, 1);
  const std::string rank1 = testing::ParticipantId({.tp = 1});
  auto buffers = Must(internal::AllocateHostBuffers(target, "t", {rank1}));
  ASSERT_OK_AND_ASSIGN(auto report,
                       LoadCheckpoint(ckpt, target, buffers.bindings));
  EXPECT_EQ(report.bytes, ckpt.tensor_bytes() / 2);
  EXPECT_EQ(report.bytes_read, ckpt.tensor_bytes() / 2);
  ExpectPattern(target, buffers);
}

TEST(HfCheckpointTest, TargetTensorsMustMatchTheCheckpoint) {
  TempDir dir("hf-mismatch");
  auto ckpt = Must(
      HfCheckpoint::Open(MakeCheckpoint(dir.path(), {{"w", "BF16", {4, 4}}})));
  const auto wrong_shape = TpLayout({{"w", "BF16", {4, 8}}}, 0);
  auto b1 = Must(internal::AllocateHostBuffers(wrong_shape, "t"));
  EXPECT_THAT(LoadCheckpoint(ckpt, wrong_shape, b1.bindings),
              StatusIs(StatusCode::kInvalidArgument,
                       "tensor w is bfloat16 [4, 4] in a.safetensors but "
                       "bfloat16 [4, 8] in the target placement"));
  const auto missing = TpLayout({{"v", "BF16", {4, 4}}}, 0);
  auto b2 = Must(internal::AllocateHostBuffers(missing, "t"));
  EXPECT_THAT(LoadCheckpoint(ckpt, missing, b2.bindings),
              StatusIs(StatusCode::kNotFound,
                       HasSubstr("has no tensor v of the target placement")));
}

TEST(HfCheckpointTest, AFileTruncatedAfterOpenIsDataLossNotACrash) {
  TempDir dir("hf-trunc");
  const std::vector<Spec> specs = {{"w", "F32", {64, 64}}, {"v", "F32", {8}}};
  auto ckpt = Must(HfCheckpoint::Open(MakeCheckpoint(dir.path(), specs)));
  ASSERT_EQ(::truncate((dir.path() + "/a.safetensors").c_str(), 100), 0);
  const auto target = TpLayout({{"w", "F32", {64, 64}}}, 0);
  auto buffers = Must(internal::AllocateHostBuffers(target, "t"));
  EXPECT_THAT(
      LoadCheckpoint(ckpt, target, buffers.bindings),
      StatusIs(StatusCode::kDataLoss, HasSubstr("a.safetensors is short")));
}

TEST(HfCheckpointTest, MalformedDirectoriesNameTheFileAndTensor) {
  TempDir dir("hf-bad");
  const std::string d = dir.path();
  EXPECT_THAT(
      HfCheckpoint::Open(d),
      StatusIs(StatusCode::kNotFound, d + " holds no .safetensors files"));
  WriteFile(d + "/x.safetensors", "abc");
  EXPECT_THAT(HfCheckpoint::Open(d),
              StatusIs(StatusCode::kInvalidArgument,
                       "x.safetensors: truncated safetensors header: 3 bytes, "
                       "shorter than the 8-byte length"));
  WriteFile(d + "/x.safetensors", std::string("\x40\0\0\0\0\0\0\0{}", 10));
  EXPECT_THAT(HfCheckpoint::Open(d),
              StatusIs(StatusCode::kInvalidArgument,
                       "x.safetensors: safetensors header length 64 runs past "
                       "the end of the file (10 bytes)"));
  WriteFile(d + "/x.safetensors", Encode({{"w", "U8", {4}}}));
  WriteFile(d + "/y.safetensors", Encode({{"w", "U8", {4}}}));
  EXPECT_THAT(HfCheckpoint::Open(d),
              StatusIs(StatusCode::kInvalidArgument,
                       "duplicate tensor w in x.safetensors and "
                       "y.safetensors"));
  ::unlink((d + "/y.safetensors").c_str());
  ASSERT_EQ(::mkfifo((d + "/z.safetensors").c_str(), 0644), 0);
  EXPECT_THAT(HfCheckpoint::Open(d),
              StatusIs(StatusCode::kInvalidArgument,
                       d + "/z.safetensors is not a regular file (a FIFO)"));
  ::unlink((d + "/z.safetensors").c_str());
  // A symbolic link to a regular file is followed (the hub cache).
  WriteFile(d + "/blob", Encode({{"v", "U8", {4}}}));
  ASSERT_EQ(::symlink("blob", (d + "/v.safetensors").c_str()), 0);
  ASSERT_OK_AND_ASSIGN(auto ckpt, HfCheckpoint::Open(d));
  EXPECT_EQ(ckpt.tensors().size(), 2u);
}

TEST(HfCheckpointTest, TheIndexMustDescribeTheFiles) {
  TempDir dir("hf-index");
  const std::string d = dir.path();
  WriteFile(d + "/a.safetensors", Encode({{"w", "U8", {4}}}));
  const std::string index = d + "/model.safetensors.index.json";
  WriteFile(index,
            R"({"weight_map":{"w":"a.safetensors","v":"b.safetensors"}})");
  EXPECT_THAT(HfCheckpoint::Open(d),
              StatusIs(StatusCode::kNotFound,
                       "model.safetensors.index.json names b.safetensors, "
                       "which is not in " +
                           d));
  WriteFile(index,
            R"({"weight_map":{"w":"a.safetensors","v":"a.safetensors"}})");
  EXPECT_THAT(HfCheckpoint::Open(d),
              StatusIs(StatusCode::kInvalidArgument,
                       "model.safetensors.index.json maps tensor v to "
                       "a.safetensors, which does not hold it"));
  WriteFile(index, R"({"weight_map":{}})");
  EXPECT_THAT(HfCheckpoint::Open(d),
              StatusIs(StatusCode::kInvalidArgument,
                       d + "/model.safetensors.index.json: empty weight_map"));
  WriteFile(index, R"({"weight_map":{"w":"../a.safetensors"}})");
  EXPECT_THAT(HfCheckpoint::Open(d),
              StatusIs(StatusCode::kInvalidArgument,
                       d + "/model.safetensors.index.json: weight_map entry w "
                           "must name a .safetensors file of the directory"));
  WriteFile(d + "/b.safetensors", Encode({{"v", "U8", {4}}, {"u", "U8", {4}}}));
  WriteFile(index,
            R"({"weight_map":{"w":"a.safetensors","v":"b.safetensors"}})");
  EXPECT_THAT(HfCheckpoint::Open(d),
              StatusIs(StatusCode::kInvalidArgument,
                       "b.safetensors: tensor u is not in "
                       "model.safetensors.index.json"));
}

// Each participant writes its own share in a call of its own; the result
// reads back byte for byte.
TEST(CheckpointWriterTest, ParticipantsWriteTheirOwnRangesSeparately) {
  TempDir dir("hf-write");
  const auto specs = AllDtypes();
  const std::string src = dir.path() + "/src";
  ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
  auto ckpt = Must(HfCheckpoint::Open(MakeCheckpoint(src, specs)));
  for (int64_t dim : {0, 1}) {
    const auto layout = TpLayout(specs, dim, /*dp=*/2);
    auto buffers = Must(internal::AllocateHostBuffers(layout, "t"));
    ASSERT_OK(LoadCheckpoint(ckpt, layout, buffers.bindings).status());
    CheckpointWriteOptions options;
    options.max_file_bytes = 300;
    options.staging_bytes = 40;  // windows smaller than a tensor
    ASSERT_OK_AND_ASSIGN(auto plan, PlanCheckpointWrite(layout, options));
    EXPECT_GE(plan.files().size(), 3u);
    const std::string out = dir.path() + "/out" + std::to_string(dim);
    ASSERT_OK(CreateCheckpointFiles(plan, out));
    uint64_t written = 0;
    for (const auto& b : buffers.bindings) {
      ASSERT_OK_AND_ASSIGN(
          auto r, WriteCheckpointFragments(plan, layout, {b}, out, options));
      written += r.bytes;
    }
    EXPECT_EQ(written, ckpt.tensor_bytes());
    ASSERT_OK(FinishCheckpoint(plan, out));
    EXPECT_THAT(CreateCheckpointFiles(plan, out),
                StatusIs(StatusCode::kAlreadyExists, HasSubstr("exists")));
    ASSERT_OK_AND_ASSIGN(auto back, HfCheckpoint::Open(out));
    ASSERT_EQ(back.tensors().size(), specs.size());
    const auto whole = TpLayout(specs, 0);
    auto reread = Must(internal::AllocateHostBuffers(whole, "r"));
    ASSERT_OK(LoadCheckpoint(back, whole, reread.bindings).status());
    ExpectPattern(whole, reread);
  }
}

// Every participant in a process of its own, all writing at once into the
// shared files.
TEST(CheckpointWriterTest, ProcessesWriteConcurrently) {
  TempDir dir("hf-procs");
  const std::vector<Spec> specs = {
      {"a", "BF16", {64, 48}}, {"b", "F32", {32, 16}}, {"c", "U8", {8, 256}}};
  const std::string src = dir.path() + "/src";
  ASSERT_EQ(::mkdir(src.c_str(), 0755), 0);
  auto ckpt = Must(HfCheckpoint::Open(MakeCheckpoint(src, specs)));
  const auto layout = TpLayout(specs, 1, /*dp=*/2);
  auto buffers = Must(internal::AllocateHostBuffers(layout, "t"));
  ASSERT_OK(LoadCheckpoint(ckpt, layout, buffers.bindings).status());
  CheckpointWriteOptions options;
  options.max_file_bytes = 4096;
  options.staging_bytes = 1000;
  ASSERT_OK_AND_ASSIGN(auto plan, PlanCheckpointWrite(layout, options));
  const std::string out = dir.path() + "/out";
  ASSERT_OK(CreateCheckpointFiles(plan, out));
  std::vector<pid_t> children;
  for (const auto& b : buffers.bindings) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto r = WriteCheckpointFragments(plan, layout, {b}, out, options);
      ::_exit(r.ok() ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  ASSERT_OK(FinishCheckpoint(plan, out));
  ASSERT_OK_AND_ASSIGN(auto back, HfCheckpoint::Open(out));
  const auto whole = TpLayout(specs, 0);
  auto reread = Must(internal::AllocateHostBuffers(whole, "r"));
  ASSERT_OK(LoadCheckpoint(back, whole, reread.bindings).status());
  ExpectPattern(whole, reread);
}

TEST(CheckpointWriterTest, NeverWritesThroughASymbolicLink) {
  TempDir dir("hf-link");
  const auto layout = TpLayout({{"w", "U8", {4, 4}}}, 0);
  ASSERT_OK_AND_ASSIGN(auto plan, PlanCheckpointWrite(layout));
  const std::string real = dir.path() + "/real";
  ASSERT_EQ(::mkdir(real.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(real.c_str(), (dir.path() + "/out").c_str()), 0);
  EXPECT_THAT(CreateCheckpointFiles(plan, dir.path() + "/out"),
              StatusIs(StatusCode::kInvalidArgument,
                       dir.path() + "/out is not a directory (or is a link)"));
  // A link in place of a file of the plan is an existing file.
  const std::string partial = real + "/" + plan.files()[0].name + ".partial";
  ASSERT_EQ(::symlink("/dev/null", partial.c_str()), 0);
  EXPECT_THAT(
      CreateCheckpointFiles(plan, real),
      StatusIs(StatusCode::kAlreadyExists,
               partial + " exists: refusing to overwrite a checkpoint"));
  struct stat sb;
  ASSERT_EQ(::lstat(partial.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISLNK(sb.st_mode));
}

TEST(CheckpointWriterTest, FilesAreNamedAlignedAndIndexed) {
  const auto layout = TpLayout({{"model.layers.10.w", "U8", {4, 2}},
                                {"model.layers.2.w", "F32", {2, 2}},
                                {"model.layers.2.a", "U8", {2, 2}}},
                               0);
  CheckpointWriteOptions options;
  options.max_file_bytes = 20;
  ASSERT_OK_AND_ASSIGN(auto plan, PlanCheckpointWrite(layout, options));
  // Natural order: layer 2 (a, then w) in the first file, layer 10 next.
  ASSERT_EQ(plan.files().size(), 2u);
  EXPECT_EQ(plan.files()[0].name, "model-00001-of-00002.safetensors");
  std::map<std::string, CheckpointWriteTensor> by_name;
  for (const auto& t : plan.tensors()) by_name[t.name] = t;
  EXPECT_EQ(by_name["model.layers.2.a"].file, 0u);
  EXPECT_EQ(by_name["model.layers.2.w"].file, 0u);
  EXPECT_EQ(by_name["model.layers.10.w"].file, 1u);
  // F32 first, so it is aligned; the data starts at a multiple of 8.
  const auto& f0 = plan.files()[0];
  EXPECT_EQ(f0.header.size() % 8, 0u);
  EXPECT_EQ(by_name["model.layers.2.w"].offset, f0.header.size());
  EXPECT_EQ(by_name["model.layers.2.a"].offset, f0.header.size() + 16);
  EXPECT_EQ(plan.index_json(),
            "{\"metadata\":{\"total_size\":28},\"weight_map\":{"
            "\"model.layers.10.w\":\"model-00002-of-00002.safetensors\","
            "\"model.layers.2.a\":\"model-00001-of-00002.safetensors\","
            "\"model.layers.2.w\":\"model-00001-of-00002.safetensors\"}}\n");
  ASSERT_OK_AND_ASSIGN(
      auto h, ParseSafetensorsHeader(
                  "f0", std::string_view(f0.header).substr(8), f0.size));
  EXPECT_EQ(h.metadata.at("format"), "pt");
}

}  // namespace
}  // namespace reshard
