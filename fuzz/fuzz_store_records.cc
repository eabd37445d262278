// The weight store's control records (src/store/records.h): decision,
// started and lease. Input: one selector byte (0 decision, 1 started, 2
// lease) and the record bytes. Properties: a record the decoder rejects is
// DataLoss naming its key, never a crash or a default; what it accepts,
// written again, decodes to the same value.

#include <string>

#include "fuzz/fuzz_check.h"
#include "store/records.h"

namespace {

namespace internal = reshard::internal;

constexpr std::string_view kKey = "weights/default/r/v/1/records/k";

void CheckRejection(const reshard::Status& st) {
  FUZZ_CHECK(st.IsDataLoss(), "a malformed record is DataLoss");
  FUZZ_CHECK(st.message().ends_with(kKey), "the error names the key");
}

// `parse` accepted `got` from some text: its canonical rendering decodes
// to the same value.
template <typename Parse, typename Render>
void CheckRoundTrip(const reshard::Result<int64_t>& got, Parse parse,
                    Render render) {
  if (!got.ok()) return CheckRejection(got.status());
  auto again = parse(render(*got), kKey);
  FUZZ_CHECK(again.ok() && *again == *got, "a written record reads back");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text = reshard::fuzz::AsView(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      auto d = internal::ParseDecisionRecord(text, kKey);
      if (!d.ok()) {
        CheckRejection(d.status());
        break;
      }
      auto again = internal::ParseDecisionRecord(
          internal::DecisionRecord(*d, std::string(64, 'a')), kKey);
      FUZZ_CHECK(again.ok() && *again == *d, "a written decision reads back");
      break;
    }
    case 1:
      CheckRoundTrip(internal::ParseStartedRecord(text, kKey),
                     internal::ParseStartedRecord, internal::StartedRecord);
      break;
    case 2:
      CheckRoundTrip(internal::ParseLeaseRecord(text, kKey),
                     internal::ParseLeaseRecord, internal::LeaseRecord);
      break;
  }
  return 0;
}
