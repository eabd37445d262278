// Parameter files: ParameterMemory::MapFile sees what WriteParameterFile
// wrote without reading it, keeps writes through its buffers private, and
// refuses exactly what ReadParameterFile refuses, with the same errors.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "reshard/engine.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard {
namespace {

uint8_t* Bytes(const ParameterBuffer& b) {
  return static_cast<uint8_t*>(b.data);
}

EngineParticipant TwoParameters() {
  return {"p0",
          {{"a.weight", {4, 4}, "uint8", 1, {}},
           {"b.bias", {4}, "bfloat16", 2, {}}}};
}

// Writes `p`'s file at `path` with every byte derived from its position
// in its parameter and the parameter's index.
void WriteFile(const std::string& path, const EngineParticipant& p) {
  ASSERT_OK_AND_ASSIGN(ParameterMemory m, ParameterMemory::Allocate(p));
  for (size_t k = 0; k < p.parameters.size(); ++k) {
    const ParameterBuffer& b = m.buffers().at(p.parameters[k].name);
    for (uint64_t i = 0; i < b.nbytes; ++i) {
      Bytes(b)[i] = static_cast<uint8_t>(i * 7 + k * 100 + 1);
    }
  }
  ASSERT_OK(WriteParameterFile(path, p, m.buffers()));
}

TEST(ParameterFileTest, MapFileSeesTheFileAndKeepsWritesPrivate) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/p0.safetensors";
  const EngineParticipant p = TwoParameters();
  WriteFile(path, p);
  ASSERT_OK_AND_ASSIGN(ParameterMemory mapped,
                       ParameterMemory::MapFile(path, p));
  EXPECT_EQ(mapped.bytes(), 16u + 8u);
  for (size_t k = 0; k < p.parameters.size(); ++k) {
    const ParameterBuffer& b = mapped.buffers().at(p.parameters[k].name);
    ASSERT_EQ(b.nbytes, p.parameters[k].nbytes());
    for (uint64_t i = 0; i < b.nbytes; ++i) {
      ASSERT_EQ(Bytes(b)[i], static_cast<uint8_t>(i * 7 + k * 100 + 1)) << i;
    }
  }
  // A write through the mapping changes this process's copy only.
  Bytes(mapped.buffers().at("a.weight"))[0] = 0xEE;
  EXPECT_EQ(Bytes(mapped.buffers().at("a.weight"))[0], 0xEE);
  ASSERT_OK_AND_ASSIGN(ParameterMemory read, ParameterMemory::Allocate(p));
  ASSERT_OK(ReadParameterFile(path, p, read.buffers()));
  EXPECT_EQ(Bytes(read.buffers().at("a.weight"))[0], 1);
  EXPECT_EQ(std::memcmp(read.buffers().at("b.bias").data,
                        mapped.buffers().at("b.bias").data, 8),
            0);
}

// Both ways of taking a file give the same error for every refusal.
TEST(ParameterFileTest, MapFileRefusesWhatReadRefusesAlike) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/p0.safetensors";
  const EngineParticipant p = TwoParameters();
  WriteFile(path, p);
  const auto read_error = [&](const std::string& file,
                              const EngineParticipant& q) {
    auto m = ParameterMemory::Allocate(q);
    if (!m.ok()) return m.status().ToString();
    return ReadParameterFile(file, q, m->buffers()).ToString();
  };
  const auto map_error = [&](const std::string& file,
                             const EngineParticipant& q) {
    return ParameterMemory::MapFile(file, q).status().ToString();
  };
  EngineParticipant more = p;
  more.parameters.push_back({"c.extra", {2}, "uint8", 1, {}});
  EngineParticipant fewer = p;
  fewer.parameters.pop_back();
  EngineParticipant reshaped = p;
  reshaped.parameters[0].shape = {2, 8};
  std::ofstream(dir.path() + "/short", std::ios::binary) << "abc";
  const std::vector<std::pair<std::string, EngineParticipant>> cases = {
      {path, more},     {path, fewer},
      {path, reshaped}, {dir.path() + "/short", p},
      {dir.path(), p},  {dir.path() + "/missing", p}};
  const std::vector<std::string> expected = {
      "InvalidArgument: " + path + " lacks parameter c.extra of participant p0",
      "InvalidArgument: " + path +
          " holds b.bias, which is not a parameter of participant p0 in this "
          "engine layout",
      "InvalidArgument: " + path +
          ": parameter a.weight is [4, 4] U8 in the file, but the engine "
          "layout gives participant p0 a [2, 8] uint8 parameter",
      "InvalidArgument: " + dir.path() +
          "/short is too short for a safetensors file",
      "InvalidArgument: " + dir.path() + " is not a regular file",
      "IOError: cannot open " + dir.path() +
          "/missing: No such file or directory"};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(map_error(cases[i].first, cases[i].second), expected[i]);
    EXPECT_EQ(read_error(cases[i].first, cases[i].second), expected[i]);
  }
}

}  // namespace
}  // namespace reshard
