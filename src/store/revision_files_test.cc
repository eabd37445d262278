// The revision-files records: written canonically, read strictly, and
// never a name that could leave the revision or reach a terminal raw.

#include "store/revision_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/memory_object_store.h"
#include "testing/must.h"
#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;

constexpr const char* kKey = "w/d/m/hf/0/transactions/t/files";

TEST(RevisionFilesRecordTest, CanonicalSortedAndReadBack) {
  const std::string record =
      RevisionFilesRecord({{"vocab.txt", 3}, {"config.json", 12}});
  EXPECT_EQ(record, R"({"files":[{"name":"config.json","size":12},)"
                    R"({"name":"vocab.txt","size":3}],)"
                    R"("record_type":"weight-revision-files"})");
  auto files = Must(ParseRevisionFilesRecord(record, kKey));
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].name, "config.json");
  EXPECT_EQ(files[0].size, 12u);
  EXPECT_EQ(files[1].name, "vocab.txt");
  EXPECT_EQ(files[1].size, 3u);
  EXPECT_TRUE(
      Must(ParseRevisionFilesRecord(
               R"({"files":[],"record_type":"weight-revision-files"})", kKey))
          .empty());
}

TEST(RevisionFilesRecordTest, MalformedRecordsNameTheKeyAndTheFault) {
  const std::string pre =
      "malformed revision files record: " + std::string(kKey) + ": ";
  const auto record = [](const std::string& files) {
    return R"({"files":[)" + files +
           R"(],"record_type":"weight-revision-files"})";
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {record(R"({"name":"../config.json","size":1})"),
       "revision file name ../config.json is not 1 to 128 characters of "
       "[A-Za-z0-9._-] starting with a letter or digit"},
      {record(R"({"name":"config.json\u001b[2J","size":1})"),
       "revision file name config.json\\e[2J is not"},
      {record(R"({"name":".hidden","size":1})"), "revision file name .hidden"},
      {record(R"({"name":"b.json","size":1},{"name":"a.json","size":1})"),
       "files are not sorted by name at a.json"},
      {record(R"({"name":"a.json","size":1},{"name":"a.json","size":1})"),
       "files are not sorted by name at a.json"},
      {record(R"({"name":"a.json","size":67108865})"),
       "revision file a.json holds 67108865 bytes, more than 67108864"},
      {record(R"({"name":"a.json","size":-1})"),
       "files[0].size must fit in an unsigned 64-bit integer"},
      {record(R"({"name":"a.json","size":1,"mode":1})"),
       "files[0]: revision file schema fields do not match contract: "
       "unknown field \"mode\""},
      {R"({"files":[],"record_type":"weight-upload-started"})",
       "record_type is not \"weight-revision-files\""},
      {R"({"files":[]})",
       "$: revision files schema fields do not match contract: missing "
       "field \"record_type\""},
      {"{", ""},
  };
  for (const auto& [text, why] : cases) {
    EXPECT_THAT(ParseRevisionFilesRecord(text, kKey),
                StatusIs(StatusCode::kDataLoss, HasSubstr(pre + why)))
        << text;
  }
}

TEST(RevisionFilesTest, WriteRefusesBadNamesBeforeWritingAnything) {
  testing::MemoryObjectStore b;
  const RevisionKeys keys("w/d/m/hf/0");
  EXPECT_THAT(
      WriteRevisionFiles(b, keys, "t", {{"ok.json", "x"}, {"a/b", "y"}}, 64),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("revision file name a/b is not")));
  EXPECT_THAT(
      WriteRevisionFiles(b, keys, "t", {{"a.json", "x"}, {"a.json", "y"}}, 64),
      StatusIs(StatusCode::kInvalidArgument,
               "revision file a.json named twice"));
  EXPECT_TRUE(Must(b.List("")).empty());
  // Written: checksum record and object per file, the index last.
  ASSERT_OK(WriteRevisionFiles(b, keys, "t", {{"a.json", "xyz"}}, 64));
  EXPECT_THAT(Must(b.List("")),
              ::testing::ElementsAre("w/d/m/hf/0/checksums/t/file-a.json",
                                     "w/d/m/hf/0/payload/t/file-a.json",
                                     "w/d/m/hf/0/transactions/t/files"));
  // A retry with the same bytes is fine; other bytes are refused.
  ASSERT_OK(WriteRevisionFiles(b, keys, "t", {{"a.json", "xyz"}}, 64));
  EXPECT_THAT(WriteRevisionFiles(b, keys, "t", {{"a.json", "xyw"}}, 64),
              StatusIs(StatusCode::kAlreadyExists,
                       "revision record exists with other bytes: "
                       "w/d/m/hf/0/checksums/t/file-a.json"));
}

}  // namespace
}  // namespace reshard::internal
