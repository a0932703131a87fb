#include <cerrno>

#include "dlfs/status.h"
#include "testutil.h"

namespace dlfs {
namespace {

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
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "3 is odd");
}

}  // namespace
}  // namespace dlfs
