// Opening a volume from metadata handed over in memory (what the MPI
// collective open does on every rank): the same volume as a normal open,
// and bytes that were not validated get every check bytes from disk get.
#include <cstring>

#include "dlfs/builder.h"
#include "dlfs/volume.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace volume_metadata_test {

using testing::TempDir;

class VolumeMetadataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The tree layout, whose directory a collective open hands over (a
    // compact one is mapped by each process: CompactTest).
    volume_ = testing::MakeSyntheticVolume(
        path_, {.samples = 200, .volume = {.layout = DirectoryLayout::kTree, .targets = 2}});
    ASSERT_TRUE(volume_);
  }

  // A private copy of the directory bytes, so a test can change them.
  VolumeMetadata CopyOfMetadata() const {
    VolumeMetadata md = volume_->metadata();
    auto copy = std::shared_ptr<std::byte>(new std::byte[md.directory_bytes],
                                           std::default_delete<std::byte[]>());
    std::memcpy(copy.get(), md.directory.get(), md.directory_bytes);
    md.directory = copy;
    return md;
  }

  TempDir tmp_;
  std::string path_ = tmp_ / "v.dlfs";
  std::shared_ptr<Volume> volume_;
};

TEST_F(VolumeMetadataTest, OpensTheSameVolumeWithoutReadingMetadata) {
  VolumeMetadata md = CopyOfMetadata();
  ASSERT_EQ(md.superblocks.size(), 2u);
  auto v = Volume::Open(path_, {.metadata = &md});
  ASSERT_OK(v);
  EXPECT_EQ((*v)->info().uuid, volume_->info().uuid);
  // The directory is used in place, not copied.
  EXPECT_EQ((*v)->metadata().directory.get(), md.directory.get());
  for (uint64_t i = 0; i < volume_->size(); ++i) {
    EXPECT_EQ((*v)->directory().Path(i), volume_->directory().Path(i));
    EXPECT_EQ(*(*v)->Read(i), *volume_->Read(i));
  }
}

TEST_F(VolumeMetadataTest, UnvalidatedBytesAreChecked) {
  VolumeMetadata md = CopyOfMetadata();
  auto* bytes = const_cast<std::byte*>(md.directory.get());
  bytes[md.directory_bytes / 2] ^= std::byte{0x40};
  auto v = Volume::Open(path_, {.metadata = &md});
  EXPECT_EQ(v.status().code(), StatusCode::kCorruption);
  EXPECT_NE(v.status().message().find("checksum"), std::string::npos) << v.status().ToString();

  VolumeMetadata short_md = CopyOfMetadata();
  short_md.directory_bytes -= 1;
  EXPECT_EQ(Volume::Open(path_, {.metadata = &short_md}).status().code(),
            StatusCode::kInvalidArgument);

  VolumeMetadata bad_sb = CopyOfMetadata();
  bad_sb.superblocks[1][100] ^= std::byte{1};
  auto w = Volume::Open(path_, {.metadata = &bad_sb});
  EXPECT_EQ(w.status().code(), StatusCode::kCorruption) << w.status().ToString();
  EXPECT_NE(w.status().message().find("target 1"), std::string::npos) << w.status().ToString();
}

}  // namespace volume_metadata_test
}  // namespace dlfs
