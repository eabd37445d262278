// Parameter files: ParameterMemory::MapFile sees what WriteParameterFile
// wrote without reading it, keeps writes through its buffers private, and
// refuses exactly what ReadParameterFile refuses, with the same errors:
// files of another participant, layout or parameter map (their identity),
// files with no identity unless trusted, and anything not a regular file,
// without blocking.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
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

ParameterFileIdentity IdentityOf(const std::string& participant) {
  return {participant, "sha256:placement-at-hf", "sha256:maps", "hf", 0};
}

ParameterFileExpectation Expect(const std::string& participant) {
  ParameterFileExpectation e;
  e.identity = IdentityOf(participant);
  // The same layout at revision "step-7", weight generation 7.
  e.placement_id_at = [](const std::string& revision,
                         uint64_t generation) -> Result<std::string> {
    if (revision == "step-7" && generation == 7) {
      return std::string("sha256:placement-at-step-7");
    }
    return "sha256:placement-at-" + revision + "-" + std::to_string(generation);
  };
  return e;
}

// Writes `p`'s file at `path` with every byte derived from its position
// in its parameter and the parameter's index.
void WriteFile(const std::string& path, const EngineParticipant& p,
               const ParameterFileIdentity& identity) {
  ASSERT_OK_AND_ASSIGN(ParameterMemory m, ParameterMemory::Allocate(p));
  for (size_t k = 0; k < p.parameters.size(); ++k) {
    const ParameterBuffer& b = m.buffers().at(p.parameters[k].name);
    for (uint64_t i = 0; i < b.nbytes; ++i) {
      Bytes(b)[i] = static_cast<uint8_t>(i * 7 + k * 100 + 1);
    }
  }
  ASSERT_OK(WriteParameterFile(path, p, m.buffers(), identity));
}

void WriteFile(const std::string& path, const EngineParticipant& p) {
  WriteFile(path, p, IdentityOf(p.participant_id));
}

TEST(ParameterFileTest, MapFileSeesTheFileAndKeepsWritesPrivate) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/p0.safetensors";
  const EngineParticipant p = TwoParameters();
  WriteFile(path, p);
  ASSERT_OK_AND_ASSIGN(ParameterMemory mapped,
                       ParameterMemory::MapFile(path, p, Expect("p0")));
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
  ASSERT_OK(ReadParameterFile(path, p, read.buffers(), Expect("p0")));
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
    return ReadParameterFile(file, q, m->buffers(), Expect("p0")).ToString();
  };
  const auto map_error = [&](const std::string& file,
                             const EngineParticipant& q) {
    return ParameterMemory::MapFile(file, q, Expect("p0")).status().ToString();
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
      "InvalidArgument: " + dir.path() + " is not a regular file (a directory)",
      "NotFound: cannot read " + dir.path() +
          "/missing: No such file or directory"};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(map_error(cases[i].first, cases[i].second), expected[i]);
    EXPECT_EQ(read_error(cases[i].first, cases[i].second), expected[i]);
  }
}

// Each way of taking a file, as its error text.
std::vector<std::string> TakeErrors(const std::string& path,
                                    const EngineParticipant& p,
                                    const ParameterFileExpectation& expect) {
  std::vector<std::string> out;
  out.push_back(ParameterMemory::MapFile(path, p, expect).status().ToString());
  auto m = ParameterMemory::Allocate(p);
  out.push_back(
      m.ok() ? ReadParameterFile(path, p, m->buffers(), expect).ToString()
             : m.status().ToString());
  return out;
}

// The probe swapped the files of two TP ranks of the same shapes: each
// was read as the other's. Each file now says whose it is.
TEST(ParameterFileTest, SwappedParticipantFilesAreRefusedNamingBothIdentities) {
  testing::TempDir dir;
  EngineParticipant t1 = TwoParameters();
  t1.participant_id = "p1";
  const std::string path = dir.path() + "/p0.safetensors";
  WriteFile(path, t1);  // p1's file in p0's place
  const std::string want =
      "InvalidArgument: " + path +
      " is the file of participant p1, placement sha256:placement-at-hf "
      "(revision hf, weight generation 0), parameter map sha256:maps, not of "
      "participant p0, placement sha256:placement-at-hf (revision hf, weight "
      "generation 0), parameter map sha256:maps";
  EXPECT_EQ(TakeErrors(path, TwoParameters(), Expect("p0")),
            std::vector<std::string>(2, want));
  // Trusting file names does not take a file that says it is another's.
  ParameterFileExpectation trusting = Expect("p0");
  trusting.trust_file_names = true;
  EXPECT_EQ(TakeErrors(path, TwoParameters(), trusting),
            std::vector<std::string>(2, want));
}

TEST(ParameterFileTest, FileOfAnotherLayoutOrParameterMapIsRefused) {
  testing::TempDir dir;
  const EngineParticipant p = TwoParameters();
  ParameterFileIdentity other_map = IdentityOf("p0");
  other_map.parameter_map_id = "sha256:other-maps";
  ParameterFileIdentity other_placement = IdentityOf("p0");
  other_placement.placement_id = "sha256:other-placement";
  int n = 0;
  for (const ParameterFileIdentity& id : {other_map, other_placement}) {
    const std::string path =
        dir.path() + "/f" + std::to_string(n++) + ".safetensors";
    WriteFile(path, p, id);
    EXPECT_EQ(
        TakeErrors(path, p, Expect("p0")),
        std::vector<std::string>(
            2, "InvalidArgument: " + path + " is the file of " + id.ToString() +
                   ", not of " + IdentityOf("p0").ToString()));
  }
}

// A file written at another revision of the same layout (engine load at
// "hf", engine reshard uploading "step-7") fills the same slot: its
// placement id is checked at its own revision.
TEST(ParameterFileTest, FileOfAnotherRevisionOfTheSameLayoutIsTaken) {
  testing::TempDir dir;
  const EngineParticipant p = TwoParameters();
  ParameterFileIdentity at_step7 = IdentityOf("p0");
  at_step7.revision = "step-7";
  at_step7.weight_generation = 7;
  at_step7.placement_id = "sha256:placement-at-step-7";
  const std::string path = dir.path() + "/p0.safetensors";
  WriteFile(path, p, at_step7);
  EXPECT_EQ(TakeErrors(path, p, Expect("p0")),
            std::vector<std::string>(2, "OK"));
  // Without a way to derive other revisions' ids, it is refused.
  ParameterFileExpectation strict = Expect("p0");
  strict.placement_id_at = nullptr;
  EXPECT_EQ(TakeErrors(path, p, strict)[0],
            "InvalidArgument: " + path + " is the file of " +
                at_step7.ToString() + ", not of " +
                IdentityOf("p0").ToString());
  // A placement id that is not the layout's at the file's revision is not.
  ParameterFileIdentity forged = at_step7;
  forged.weight_generation = 8;
  const std::string path2 = dir.path() + "/forged.safetensors";
  WriteFile(path2, p, forged);
  EXPECT_EQ(TakeErrors(path2, p, Expect("p0"))[1],
            "InvalidArgument: " + path2 + " is the file of " +
                forged.ToString() + ", not of " + IdentityOf("p0").ToString());
}

TEST(ParameterFileTest, FileWithNoIdentityIsRefusedUnlessFileNamesAreTrusted) {
  testing::TempDir dir;
  const EngineParticipant p = TwoParameters();
  // A file another tool wrote: only {"format": "pt"}.
  const std::string path = dir.path() + "/p0.safetensors";
  const std::string header = EncodeSafetensorsHeader(
      {{"a.weight", "U8", {4, 4}, 0, 16}, {"b.bias", "BF16", {4}, 16, 24}},
      {{"format", "pt"}});
  std::ofstream(path, std::ios::binary) << header << std::string(24, '\x05');
  EXPECT_EQ(TakeErrors(path, p, Expect("p0")),
            std::vector<std::string>(
                2, "FailedPrecondition: " + path +
                       " carries no identity (no reshard.participant_id or "
                       "the other reshard.* keys in its metadata): refused "
                       "as the file of participant p0 unless file names are "
                       "trusted"));
  ParameterFileExpectation trusting = Expect("p0");
  trusting.trust_file_names = true;
  ASSERT_OK_AND_ASSIGN(ParameterMemory m,
                       ParameterMemory::MapFile(path, p, trusting));
  EXPECT_EQ(Bytes(m.buffers().at("b.bias"))[7], 0x05);
}

// Identities written by a peer or by hand: partial, garbage, hostile.
TEST(ParameterFileTest, PartialOrGarbageIdentitiesAreRefusedByName) {
  testing::TempDir dir;
  const EngineParticipant p = TwoParameters();
  const auto write = [&](const std::string& name,
                         std::map<std::string, std::string> metadata) {
    const std::string path = dir.path() + "/" + name;
    metadata["format"] = "pt";
    std::ofstream(path, std::ios::binary)
        << EncodeSafetensorsHeader({{"a.weight", "U8", {4, 4}, 0, 16},
                                    {"b.bias", "BF16", {4}, 16, 24}},
                                   metadata)
        << std::string(24, '\x01');
    return path;
  };
  const ParameterFileIdentity want = IdentityOf("p0");
  // Only the participant: the rest reads "none" and differs.
  const std::string partial = write(
      "partial",
      {{"reshard.participant_id", "p0"}, {"reshard.weight_generation", "0"}});
  EXPECT_EQ(TakeErrors(partial, p, Expect("p0"))[0],
            "InvalidArgument: " + partial +
                " is the file of participant p0, placement none (revision "
                "none, weight generation 0), parameter map none, not of " +
                want.ToString());
  for (const std::string bad :
       {"", "-1", "007", "18446744073709551616", "1e3", "nan", "\x1b[31m"}) {
    const std::string path = write(
        "generation", {{"reshard.participant_id", "p0"},
                       {"reshard.placement_id", want.placement_id},
                       {"reshard.parameter_map_id", want.parameter_map_id},
                       {"reshard.revision", "hf"},
                       {"reshard.weight_generation", bad}});
    EXPECT_EQ(TakeErrors(path, p, Expect("p0")),
              std::vector<std::string>(
                  2, "InvalidArgument: " + path +
                         ": its metadata's reshard.weight_generation \"" +
                         (bad == "\x1b[31m" ? std::string("\\e[31m") : bad) +
                         "\" is not a weight generation"))
        << bad;
    ::unlink(path.c_str());
  }
  // Control characters in an id are shown escaped.
  const std::string hostile =
      write("hostile", {{"reshard.participant_id", "p0\n\x1b[2J"},
                        {"reshard.weight_generation", "0"}});
  const std::string error = TakeErrors(hostile, p, Expect("p0"))[0];
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_EQ(error.find('\x1b'), std::string::npos) << error;
}

// The probe put a FIFO among the source files: the open blocked forever.
TEST(ParameterFileTest, FifoAmongSourceFilesIsRefusedWithoutBlocking) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/p0.safetensors";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(TakeErrors(path, TwoParameters(), Expect("p0")),
            std::vector<std::string>(2, "InvalidArgument: " + path +
                                            " is not a regular file (a FIFO)"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST(ParameterFileTest, WriteRefusesAnotherParticipantsIdentity) {
  testing::TempDir dir;
  const EngineParticipant p = TwoParameters();
  ASSERT_OK_AND_ASSIGN(ParameterMemory m, ParameterMemory::Allocate(p));
  EXPECT_EQ(WriteParameterFile(dir.path() + "/x.safetensors", p, m.buffers(),
                               IdentityOf("p1"))
                .ToString(),
            "InvalidArgument: cannot write the parameters of participant p0 "
            "under the identity of " +
                IdentityOf("p1").ToString());
}

}  // namespace
}  // namespace reshard
