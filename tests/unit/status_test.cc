#include <gtest/gtest-spi.h>

#include <cerrno>
#include <string>
#include <tuple>
#include <utility>

#include "dlfs/status.h"
#include "testutil.h"

namespace dlfs {
namespace status_test {

using testing::StatusIs;

Result<int> Half(int v) {
  if (v % 2 != 0) return Status::InvalidArgument(std::to_string(v) + " is odd");
  return v / 2;
}

Result<int> Quarter(int v) {
  DLFS_ASSIGN_OR_RETURN(int h, Half(v));
  return Half(h);
}

TEST(StatusTest, FromErrnoMapsCodesAndKeepsErrno) {
  const Status nf = Status::FromErrno(ENOENT, "data/x.jpg");
  EXPECT_EQ(nf.code(), StatusCode::kNotFound);
  EXPECT_EQ(nf.sys_errno(), ENOENT);
  EXPECT_EQ(nf.message(), "data/x.jpg: No such file or directory");
  EXPECT_EQ(Status::FromErrno(EEXIST, "v").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(Status::FromErrno(EIO, "v").code(), StatusCode::kIOError);
}

TEST(StatusTest, ToStringAndContext) {
  EXPECT_EQ(Status().ToString(), "OK");
  const Status s = Status::Corruption("bad crc").WithContext("vol.dlfs");
  EXPECT_EQ(s.ToString(), "Corruption: vol.dlfs: bad crc");
  EXPECT_OK(Status().WithContext("x"));
}

TEST(StatusTest, ResultPropagatesThroughMacros) {
  ASSERT_OK(Quarter(8));
  EXPECT_EQ(*Quarter(8), 2);
  const Result<int> bad = Quarter(6);  // 6 -> 3 -> odd
  ASSERT_THAT(bad, StatusIs(StatusCode::kInvalidArgument, "3 is odd"));
  EXPECT_EQ(bad.status().message(), "3 is odd");
}

// What the matcher says about `value`: whether it matches and why.
template <typename T, typename M>
std::pair<bool, std::string> Explain(const M& matcher, const T& value) {
  ::testing::StringMatchResultListener listener;
  const bool matched = ::testing::ExplainMatchResult(matcher, value, &listener);
  return {matched, listener.str()};
}

TEST(StatusIsTest, MatchesCodeAndSubstring) {
  const Status st = Status::Corruption("v.dlfs: directory checksum mismatch");
  EXPECT_THAT(st, StatusIs(StatusCode::kCorruption, "checksum mismatch"));
  EXPECT_THAT(st, StatusIs(StatusCode::kCorruption, "v.dlfs: directory checksum mismatch"));
  EXPECT_THAT(st, StatusIs(StatusCode::kCorruption));  // any message
  EXPECT_THAT(st, StatusIs(StatusCode::kCorruption, ""));
  EXPECT_THAT(Status(), StatusIs(StatusCode::kOk));
}

TEST(StatusIsTest, RefusesWrongCodeWrongSubstringAndOk) {
  const Status st = Status::Corruption("v.dlfs: directory checksum mismatch");
  EXPECT_THAT(st, ::testing::Not(StatusIs(StatusCode::kIOError, "checksum mismatch")));
  EXPECT_THAT(st, ::testing::Not(StatusIs(StatusCode::kIOError)));
  EXPECT_THAT(st, ::testing::Not(StatusIs(StatusCode::kCorruption, "bad magic")));
  EXPECT_THAT(st, ::testing::Not(StatusIs(StatusCode::kCorruption, "Checksum")));  // case matters
  EXPECT_THAT(Status(), ::testing::Not(StatusIs(StatusCode::kCorruption)));
  EXPECT_THAT(Status(), ::testing::Not(StatusIs(StatusCode::kCorruption, "")));
}

TEST(StatusIsTest, WorksOnResults) {
  EXPECT_THAT(Half(3), StatusIs(StatusCode::kInvalidArgument, "3 is odd"));
  EXPECT_THAT(Half(3), ::testing::Not(StatusIs(StatusCode::kNotFound, "3 is odd")));
  EXPECT_THAT(Half(3), ::testing::Not(StatusIs(StatusCode::kInvalidArgument, "5 is odd")));
  EXPECT_THAT(Half(4), ::testing::Not(StatusIs(StatusCode::kInvalidArgument)));  // a value
  EXPECT_THAT(Half(4), StatusIs(StatusCode::kOk));
  const Result<std::string> r = Status::NotFound("no sample 'x'");
  EXPECT_THAT(r, StatusIs(StatusCode::kNotFound, "sample 'x'"));
}

TEST(StatusIsTest, FailureSaysWhatItGot) {
  const Status st = Status::NotFound("data/x.jpg: No such file or directory");
  auto [matched, why] = Explain(StatusIs(StatusCode::kCorruption, "checksum"), st);
  EXPECT_FALSE(matched);
  EXPECT_EQ(why, "whose status is NotFound: data/x.jpg: No such file or directory");
  std::tie(matched, why) = Explain(StatusIs(StatusCode::kInvalidArgument, "even"), Half(3));
  EXPECT_FALSE(matched);
  EXPECT_EQ(why, "whose status is InvalidArgument: 3 is odd");
  std::tie(matched, why) = Explain(StatusIs(StatusCode::kInvalidArgument), Half(4));
  EXPECT_FALSE(matched);
  EXPECT_EQ(why, "whose status is OK");
  // The description names the expected code and substring.
  EXPECT_EQ(::testing::DescribeMatcher<Status>(StatusIs(StatusCode::kCorruption, "crc")),
            "has status code Corruption and a message containing \"crc\"");
  EXPECT_EQ(::testing::DescribeMatcher<Status>(StatusIs(StatusCode::kCorruption)),
            "has status code Corruption");
  EXPECT_EQ(::testing::DescribeMatcher<Status>(StatusIs(StatusCode::kCorruption, "crc"),
                                               /*negation=*/true),
            "does not have status code Corruption or has no \"crc\" in its message");
  // GoogleTest prints a Status and a Result by their ToString().
  EXPECT_EQ(::testing::PrintToString(st), "NotFound: data/x.jpg: No such file or directory");
  EXPECT_EQ(::testing::PrintToString(Half(3)), "InvalidArgument: 3 is odd");
  EXPECT_EQ(::testing::PrintToString(Half(4)), "OK: 2");
}

TEST(StatusIsTest, FailingExpectationPrintsTheActualStatus) {
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(Status::NotFound("x.jpg: gone"), StatusIs(StatusCode::kCorruption, "checksum")),
      "whose status is NotFound: x.jpg: gone");
  EXPECT_NONFATAL_FAILURE(EXPECT_THAT(Half(3), StatusIs(StatusCode::kInvalidArgument, "even")),
                          "whose status is InvalidArgument: 3 is odd");
}

}  // namespace status_test
}  // namespace dlfs
