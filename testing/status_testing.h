// GoogleTest assertions on Status and Result<T> that print the status on
// failure, so a failing test says why instead of "Value of: st.ok()".
//
//   ASSERT_OK(store.Put(key, value));
//   EXPECT_OK(ValidateRuntimeBindings(placement, bindings)) << "case " << i;
//   ASSERT_OK_AND_ASSIGN(auto plan, LogicalTransferPlan::Make(src, dst));
//   EXPECT_THAT(st, StatusIs(StatusCode::kNotFound, "no such key: k"));
//   EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument, HasSubstr("dim")));
//
// ASSERT_OK and EXPECT_OK take a Status or a Result<T> and accept streamed
// context like any GoogleTest assertion. ASSERT_OK_AND_ASSIGN declares or
// assigns `lhs` from the value; like every ASSERT_, it returns from the
// enclosing function on failure, so that function must return void.

#ifndef RESHARD_TESTING_STATUS_TESTING_H_
#define RESHARD_TESTING_STATUS_TESTING_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <utility>

#include "reshard/status.h"

namespace reshard::testing {
namespace internal {

inline const Status& StatusOf(const Status& st) { return st; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

// The predicate-formatter of ASSERT_OK / EXPECT_OK.
template <typename S>
::testing::AssertionResult IsOk(const char* text, const S& status_or) {
  const Status& st = StatusOf(status_or);
  if (st.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << text << " is not OK: " << st.ToString();
}

// Matches a Status or Result<T> whose code is `code` and whose message
// matches `message`.
class StatusIsMatcher {
 public:
  StatusIsMatcher(StatusCode code,
                  ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  template <typename S>
  bool MatchAndExplain(const S& status_or,
                       ::testing::MatchResultListener* listener) const {
    const Status& st = StatusOf(status_or);
    *listener << "which is " << st.ToString();
    return st.code() == code_ && message_.Matches(st.message());
  }
  void DescribeTo(std::ostream* os) const {
    *os << "has code " << StatusCodeName(code_) << " and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "does not have code " << StatusCodeName(code_)
        << " or has a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  StatusCode code_;
  ::testing::Matcher<const std::string&> message_;
};

}  // namespace internal

// `EXPECT_THAT(st, StatusIs(code, "exact message"))`; the message may also
// be any string matcher (HasSubstr, StartsWith, _).
inline ::testing::PolymorphicMatcher<internal::StatusIsMatcher> StatusIs(
    StatusCode code, ::testing::Matcher<const std::string&> message) {
  return ::testing::MakePolymorphicMatcher(
      internal::StatusIsMatcher(code, std::move(message)));
}
// Any message.
inline ::testing::PolymorphicMatcher<internal::StatusIsMatcher> StatusIs(
    StatusCode code) {
  return StatusIs(code, ::testing::_);
}

}  // namespace reshard::testing

#define ASSERT_OK(expr) \
  ASSERT_PRED_FORMAT1(::reshard::testing::internal::IsOk, expr)
#define EXPECT_OK(expr) \
  EXPECT_PRED_FORMAT1(::reshard::testing::internal::IsOk, expr)

#define RESHARD_ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, rexpr)  \
  auto tmp = (rexpr);                                       \
  if (const ::testing::AssertionResult _status_testing_ok = \
          ::reshard::testing::internal::IsOk(#rexpr, tmp);  \
      !_status_testing_ok)                                  \
    FAIL() << _status_testing_ok.message();                 \
  lhs = std::move(tmp).value()

// `ASSERT_OK_AND_ASSIGN(auto x, MakeX())` declares x, or fails the test
// printing the status and returns.
#define ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  RESHARD_ASSERT_OK_AND_ASSIGN_IMPL(     \
      RESHARD_CONCAT(_status_testing_result_, __COUNTER__), lhs, rexpr)

#endif  // RESHARD_TESTING_STATUS_TESTING_H_
