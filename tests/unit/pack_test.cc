#include "dlfs/pack.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <map>

#include "dlfs/volume.h"
#include "pack/tar_shards.h"
#include "testutil.h"

namespace dlfs {
namespace pack_test {

using testing::Bytes;
using testing::StatusIs;
using testing::TempDir;

Result<PackStats> PackQuiet(const std::string& src, const std::string& vol, PackOptions opt = {}) {
  return Pack(src, vol, opt);
}

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

// ---- ImageFolder -------------------------------------------------------------

TEST(PackImageFolderTest, LabelsFollowSortedClassDirectories) {
  TempDir tmp;
  const std::string src = tmp / "src";
  // Created out of order; ImageFolder sorts byte-wise: "Zebra" < "apple" < "banana".
  const std::map<std::string, std::string> files = {
      {"banana/1.png", "b1"},  {"apple/2.png", "a2"},     {"apple/1.png", "a1"},
      {"Zebra/z.png", "z"},    {"apple/sub/3.png", "a3"}, {"notes.txt", "root file"},
      {"banana/empty.png", ""}};
  for (const auto& [p, d] : files) testing::WriteFile(src + "/" + p, Bytes(d));
  std::filesystem::create_directories(src + "/empty_class");

  PackOptions all;
  all.all_files = true;  // the root's notes.txt too, unlabelled
  auto stats = PackQuiet(src, tmp / "v.dlfs", all);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->from, SourceKind::kImageFolder);
  EXPECT_EQ(stats->samples, files.size());
  EXPECT_EQ(stats->classes, 4u);

  auto v = Volume::Open(tmp / "v.dlfs");
  ASSERT_OK(v);
  const SampleDirectory& d = (*v)->directory();
  const std::vector<std::string> classes = {"Zebra", "apple", "banana", "empty_class"};
  ASSERT_EQ(d.class_count(), classes.size());
  for (size_t c = 0; c < classes.size(); ++c) EXPECT_EQ(d.class_name(c), classes[c]);
  for (const auto& [p, data] : files) {
    auto idx = d.Lookup(p);
    ASSERT_OK(idx) << p;
    EXPECT_EQ(*(*v)->Read(*idx), Bytes(data)) << p;
    const std::string top = p.substr(0, p.find('/'));
    const auto it = std::find(classes.begin(), classes.end(), top);
    const uint32_t want =
        it == classes.end() ? kNoLabel : static_cast<uint32_t>(it - classes.begin());
    EXPECT_EQ(d.label(*idx), want) << p;
  }
}

TEST(PackImageFolderTest, OnlyWhatImageFolderLoadsIsPacked) {
  TempDir tmp;
  const std::string src = tmp / "src";
  for (const char* p : {"cat/1.JPG", "cat/2.jpeg", "cat/.DS_Store", "cat/._3.jpg", "cat/README.md",
                        "cat/.cache/4.png", "cat/sub/5.TIFF", "dog/x.webp", "dog/notes.txt",
                        "root.png", ".complete", ".ipynb_checkpoints/6.png"}) {
    testing::WriteFile(src + "/" + p, Bytes(p));
  }
  PackOptions o;
  std::vector<PackProgress> reports;
  o.on_progress = [&](const PackProgress& p) { reports.push_back(p); };
  auto stats = PackQuiet(src, tmp / "v.dlfs", o);
  ASSERT_OK(stats);
  // As torchvision 0.14: hidden directories are classes, hidden images samples.
  EXPECT_EQ(stats->samples, 7u);
  EXPECT_EQ(stats->classes, 3u);
  EXPECT_EQ(stats->ignored_not_image, 3u);  // .DS_Store, README.md, notes.txt
  EXPECT_EQ(stats->ignored_at_root, 2u);    // .complete, root.png
  EXPECT_EQ(stats->skipped_hidden, 0u);
  EXPECT_EQ(stats->ignored_examples.front(), ".complete");  // in walking order
  EXPECT_TRUE(stats->empty_classes.empty());
  // Progress counted the samples before packing them.
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.front().total_samples, 7u);
  auto v = Volume::Open(tmp / "v.dlfs");
  ASSERT_OK(v);
  const SampleDirectory& d = (*v)->directory();
  EXPECT_EQ(d.class_name(0), ".ipynb_checkpoints");
  EXPECT_EQ(d.class_name(1), "cat");
  EXPECT_EQ(d.class_name(2), "dog");
  for (const char* p : {".ipynb_checkpoints/6.png", "cat/1.JPG", "cat/2.jpeg", "cat/._3.jpg",
                        "cat/.cache/4.png", "cat/sub/5.TIFF", "dog/x.webp"}) {
    auto idx = d.Lookup(p);
    ASSERT_OK(idx) << p;
    EXPECT_EQ(*(*v)->Read(*idx), Bytes(p));
  }

  // skip_hidden: what dlfs packed before issue 41.
  PackOptions skip;
  skip.skip_hidden = true;
  stats = PackQuiet(src, tmp / "skip.dlfs", skip);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->samples, 4u);
  EXPECT_EQ(stats->classes, 2u);
  EXPECT_EQ(stats->ignored_not_image, 2u);  // README.md, notes.txt
  EXPECT_EQ(stats->skipped_hidden, 5u);     // .DS_Store ._3.jpg .cache .complete .ipynb_checkpoints
  EXPECT_EQ(stats->skipped_hidden_classes, 1u);  // .ipynb_checkpoints
  EXPECT_EQ(stats->ignored_at_root, 1u);         // root.png

  // all_files: every regular file; hidden directories are classes too.
  PackOptions all;
  all.all_files = true;
  stats = PackQuiet(src, tmp / "all.dlfs", all);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->samples, 12u);
  EXPECT_EQ(stats->ignored(), 0u);
  EXPECT_EQ(stats->classes, 3u);
}

TEST(PackImageFolderTest, TreeWithoutClassDirectoryIsAnError) {
  TempDir tmp;
  const std::string src = tmp / "flat";
  testing::WriteFile(src + "/1.png", Bytes("1"));
  testing::WriteFile(src + "/.2.png", Bytes("2"));
  PackOptions o;
  o.from = SourceKind::kImageFolder;
  auto r = PackQuiet(src, tmp / "v.dlfs", o);
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument, src + ": no class directories"));
  EXPECT_NE(r.status().message().find("all_files packs every file"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(tmp / "v.dlfs"));
  o.all_files = true;
  auto stats = PackQuiet(src, tmp / "v.dlfs", o);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->samples, 2u);

  // Class directories, but nothing ImageFolder loads in them.
  testing::WriteFile(tmp / "txt/a/notes.txt", Bytes("n"));
  r = PackQuiet(tmp / "txt", tmp / "t.dlfs");
  ASSERT_THAT(r,
              StatusIs(StatusCode::kInvalidArgument, "no image files (other entries left out: 1)"));

  // A hidden directory is a class (as torchvision's), unless skip_hidden.
  testing::WriteFile(tmp / "hidden/.only/1.png", Bytes("1"));
  stats = PackQuiet(tmp / "hidden", tmp / "h.dlfs");
  ASSERT_OK(stats);
  EXPECT_EQ(stats->classes, 1u);
  PackOptions skip;
  skip.skip_hidden = true;
  ASSERT_THAT(PackQuiet(tmp / "hidden", tmp / "h2.dlfs", skip),
              StatusIs(StatusCode::kInvalidArgument, "no class directories"));
}

TEST(PackImageFolderTest, UnreadableSourceIsNamedOrSkipped) {
  TempDir tmp;
  const std::string src = tmp / "src";
  testing::WriteFile(src + "/a/1.png", Bytes("1"));
  testing::WriteFile(src + "/a/3.png", Bytes("3"));
  ASSERT_EQ(::symlink("/nonexistent/target", (src + "/a/2.png").c_str()), 0);

  auto failed = PackQuiet(src, tmp / "v.dlfs");
  ASSERT_THAT(failed, StatusIs(StatusCode::kNotFound, "a/2.png"));
  EXPECT_NE(failed.status().message().find("(set skip_unreadable to skip sources that fail)"),
            std::string::npos);
  // An interrupted pack leaves neither a volume nor a temporary file.
  EXPECT_EQ(DirEntries(tmp.path()), std::vector<std::string>{"src"});

  PackOptions skip;
  skip.skip_unreadable = true;
  auto stats = PackQuiet(src, tmp / "v.dlfs", skip);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->samples, 2u);
  EXPECT_EQ(stats->skipped, 1u);
  ASSERT_EQ(stats->skipped_examples.size(), 1u);
  EXPECT_NE(stats->skipped_examples[0].find("a/2.png"), std::string::npos);
}

TEST(PackImageFolderTest, FifoIsNotReadAsASample) {
  TempDir tmp;
  const std::string src = tmp / "src";
  testing::WriteFile(src + "/a/1.png", Bytes("1"));
  ASSERT_EQ(::mkfifo((src + "/a/pipe.png").c_str(), 0644), 0);
  auto r = PackQuiet(src, tmp / "v.dlfs");  // must not block on the FIFO
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument, "not a regular file"));
}

TEST(PackTest, ExistingVolumeNeedsForceAndCancelLeavesNothing) {
  TempDir tmp;
  const std::string src = tmp / "src";
  testing::WriteFile(src + "/a/1.png", Bytes("1"));
  testing::WriteFile(tmp / "v.dlfs", Bytes("precious"));
  auto r = PackQuiet(src, tmp / "v.dlfs");
  EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(testing::ReadFile(tmp / "v.dlfs"), Bytes("precious"));

  std::atomic<bool> cancel{true};
  PackOptions opt;
  opt.volume.overwrite = true;
  opt.cancel = &cancel;
  r = PackQuiet(src, tmp / "v.dlfs", opt);
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  EXPECT_EQ(testing::ReadFile(tmp / "v.dlfs"), Bytes("precious"));
  EXPECT_EQ(DirEntries(tmp.path()), (std::vector<std::string>{"src", "v.dlfs"}));

  cancel = false;
  ASSERT_OK(PackQuiet(src, tmp / "v.dlfs", opt));
  EXPECT_OK(Volume::Open(tmp / "v.dlfs"));
}

void WriteTar(const std::string& path,
              const std::vector<std::pair<std::string, std::string>>& members, bool gzip);

// Issue 13 #8: "dlfs pack SRC -o SRC/sub/v.dlfs" packed its own temporary
// file (and on a small disk read its growing output until ENOSPC).
TEST(PackTest, OutputInsideTheSourceIsRefused) {
  TempDir tmp;
  const std::string src = tmp / "src";
  testing::WriteFile(src + "/a/1.png", Bytes("1"));
  std::filesystem::create_directories(src + "/sub");
  std::filesystem::create_directory_symlink(src, tmp / "link");
  const std::vector<std::string> outputs = {src + "/sub/v.dlfs", src + "/v.dlfs",
                                            tmp / "link/sub/v.dlfs", src + "/../src/v.dlfs"};
  for (const std::string& out : outputs) {
    auto r = PackQuiet(src, out);
    ASSERT_THAT(
        r, StatusIs(StatusCode::kInvalidArgument, out + ": is inside the source directory " + src +
                                                      ", so packing would read its own output"))
        << out;
  }
  // A second target inside the source is refused too.
  PackOptions two;
  two.volume.targets = 2;
  two.volume.target_paths = {src + "/sub/v.t1"};
  auto r = PackQuiet(src, tmp / "v.dlfs", two);
  EXPECT_NE(r.status().message().find("v.t1: is inside the source directory"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(DirEntries(src), (std::vector<std::string>{"a", "sub"}));
  EXPECT_TRUE(std::filesystem::is_empty(src + "/sub"));
  // Beside it is fine, even with a name that starts the same.
  ASSERT_OK(PackQuiet(src, tmp / "src2.dlfs"));
  // A single-file source cannot be its own output, --force or not.
  WriteTar(tmp / "x.tar", {{"a.jpg", "1"}}, false);
  PackOptions force;
  force.volume.overwrite = true;
  r = PackQuiet(tmp / "x.tar", tmp / "x.tar", force);
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument, "x.tar: is the source"));
}

// Issue 13 #9: a pack killed with SIGKILL left "v.dlfs.tmp.PID.N" forever.
// The next pack to that path removes such files when their process is gone
// and nobody holds their lock, and says so.
TEST(PackTest, StaleTemporariesOfDeadPacksAreRemoved) {
  TempDir tmp;
  const std::string src = tmp / "src";
  testing::WriteFile(src + "/a/1.png", Bytes("1"));
  // A process id that is certainly not running: a child that has exited.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = std::to_string(child);
  const std::string stale = tmp / ("v.dlfs.tmp." + dead + ".3");
  testing::WriteFile(stale, testing::RandomBytes(5000, 1));
  // Left alone: a running process's (pid 1), a locked one (a builder on
  // another host whose pid means nothing here), other names.
  const std::string running = tmp / "v.dlfs.tmp.1.0";
  const std::string locked = tmp / ("v.dlfs.tmp." + dead + ".4");
  testing::WriteFile(running, Bytes("live"));
  testing::WriteFile(locked, Bytes("locked"));
  const int fd = ::open(locked.c_str(), O_RDWR);
  struct flock lk {};
  lk.l_type = F_WRLCK;
  ASSERT_EQ(::fcntl(fd, F_OFD_SETLK, &lk), 0);
  for (const char* other : {"v.dlfs.tmp.x.0", "v.dlfs.tmp.12", "w.dlfs.tmp.1234567.0"}) {
    testing::WriteFile(tmp / other, Bytes("other"));
  }
  std::filesystem::create_directory(tmp / ("v.dlfs.tmp." + dead + ".5"));

  auto stats = PackQuiet(src, tmp / "v.dlfs");
  ASSERT_OK(stats);
  ASSERT_EQ(stats->removed_temporaries.size(), 1u);
  EXPECT_EQ(stats->removed_temporaries[0], stale + " (left by process " + dead + ", 5000 bytes)");
  std::vector<std::string> left = {"src",
                                   "v.dlfs",
                                   "v.dlfs.tmp." + dead + ".4",
                                   "v.dlfs.tmp." + dead + ".5",
                                   "v.dlfs.tmp.1.0",
                                   "v.dlfs.tmp.12",
                                   "v.dlfs.tmp.x.0",
                                   "w.dlfs.tmp.1234567.0"};
  std::sort(left.begin(), left.end());
  EXPECT_EQ(DirEntries(tmp.path()), left);
  ::close(fd);
  // A live builder holds the lock on its temporary file, which is what
  // protects it from builders that cannot see its pid.
  ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(tmp / "w.dlfs"));
  const int probe = ::open(b->temp_path().c_str(), O_RDWR);
  ASSERT_GE(probe, 0);
  EXPECT_NE(::fcntl(probe, F_OFD_SETLK, &lk), 0);
  ::close(probe);
}

// ---- IDX ---------------------------------------------------------------------

void PutBE32(std::string* s, uint32_t v) {
  for (int k = 3; k >= 0; --k) s->push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}

// Writes an IDX pair with `n` images of rows x cols; image i is filled with
// byte (i * 7 + j) and labelled i % 10.
void WriteIdx(const std::string& dir, const std::string& split, uint32_t n, uint32_t rows,
              uint32_t cols, bool gzip) {
  std::string images, labels;
  PutBE32(&images, 0x803);
  PutBE32(&images, n);
  PutBE32(&images, rows);
  PutBE32(&images, cols);
  PutBE32(&labels, 0x801);
  PutBE32(&labels, n);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j = 0; j < rows * cols; ++j) images.push_back(static_cast<char>(i * 7 + j));
    labels.push_back(static_cast<char>(i % 10));
  }
  auto write = [&](const std::string& name, const std::string& data) {
    const std::string path = dir + "/" + name + (gzip ? ".gz" : "");
    std::filesystem::create_directories(dir);
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      ASSERT_NE(f, nullptr);
      ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())),
                static_cast<int>(data.size()));
      gzclose(f);
    } else {
      testing::WriteFile(path, Bytes(data));
    }
  };
  write(split + "-images-idx3-ubyte", images);
  write(split + "-labels-idx1-ubyte", labels);
}

TEST(PackIdxTest, GzippedAndPlainSplits) {
  TempDir tmp;
  WriteIdx(tmp / "src", "train", 25, 4, 3, /*gzip=*/true);
  WriteIdx(tmp / "src", "t10k", 7, 4, 3, /*gzip=*/false);
  PackOptions o;
  std::vector<PackProgress> reports;
  o.on_progress = [&](const PackProgress& p) { reports.push_back(p); };
  auto stats = PackQuiet(tmp / "src", tmp / "v.dlfs", o);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->from, SourceKind::kIdx);
  EXPECT_EQ(stats->samples, 32u);
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.front().total_samples, 32u);  // both splits, from their headers
  auto v = Volume::Open(tmp / "v.dlfs");
  ASSERT_OK(v);
  const SampleDirectory& d = (*v)->directory();
  for (auto [split, n] : {std::pair{"train", 25u}, std::pair{"test", 7u}}) {
    for (uint32_t i = 0; i < n; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "%s/%05u", split, i);
      auto idx = d.Lookup(name);
      ASSERT_OK(idx) << name;
      EXPECT_EQ(d.label(*idx), i % 10);
      std::vector<std::byte> want(12);
      for (uint32_t j = 0; j < 12; ++j) want[j] = static_cast<std::byte>(i * 7 + j);
      EXPECT_EQ(*(*v)->Read(*idx), want) << name;
    }
  }
}

TEST(PackIdxTest, BrokenFilesAreNamed) {
  TempDir tmp;
  WriteIdx(tmp / "src", "train", 5, 2, 2, false);
  // Labels file says 6 entries.
  std::string labels;
  PutBE32(&labels, 0x801);
  PutBE32(&labels, 6);
  labels.append(6, '\1');
  testing::WriteFile(tmp / "src/train-labels-idx1-ubyte", Bytes(labels));
  auto r = PackQuiet(tmp / "src", tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kCorruption, "train-labels-idx1-ubyte: has 6 labels"));

  // Images cut short.
  WriteIdx(tmp / "src2", "train", 5, 2, 2, false);
  std::filesystem::resize_file(tmp / "src2/train-images-idx3-ubyte", 16 + 4 * 3 + 1);
  r = PackQuiet(tmp / "src2", tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kCorruption,
                          "train-images-idx3-ubyte: truncated: its header says 5 "
                          "images of 2x2 (36 bytes with the header), the file has 29"));
  // The same, gzipped: the size is only known at the stream's end.
  WriteIdx(tmp / "src2gz", "train", 5, 2, 2, true);
  {
    auto plain = testing::ReadFile(tmp / "src2/train-images-idx3-ubyte");
    gzFile f = gzopen((tmp / "src2gz/train-images-idx3-ubyte.gz").c_str(), "wb");
    gzwrite(f, plain.data(), static_cast<unsigned>(plain.size()));
    gzclose(f);
  }
  r = PackQuiet(tmp / "src2gz", tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kCorruption,
                          "train-images-idx3-ubyte.gz: truncated while reading image 3"));

  // Not IDX at all.
  testing::WriteFile(tmp / "src3/train-images-idx3-ubyte", Bytes("GIF89a..........."));
  testing::WriteFile(tmp / "src3/train-labels-idx1-ubyte", Bytes("x"));
  r = PackQuiet(tmp / "src3", tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kCorruption, "train-images-idx3-ubyte: not an IDX file"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "v.dlfs"));
}

// Issue 13 #3: a 34-byte file whose header claims one 32768 x 32768 image
// allocated 1 GiB before finding it truncated. Now the claim is checked
// against the file, and a gzipped one streams (nothing sized by the header).
TEST(PackIdxTest, HeaderClaimsAreCheckedBeforeAllocating) {
  TempDir tmp;
  const std::string fixture = std::string(DLFS_TEST_DATA) + "/hostile/idx-huge";
  auto r = PackQuiet(fixture, tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kCorruption,
                          fixture + "/train-images-idx3-ubyte: truncated: its header says 1 "
                                    "images of 32768x32768 (1073741840 bytes with the header), "
                                    "the file has 34 bytes"));

  std::filesystem::create_directories(tmp / "gz");
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"}) {
    auto bytes = testing::ReadFile(fixture + "/" + name);
    gzFile f = gzopen((tmp / "gz/" + name + ".gz").c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  }
  r = PackQuiet(tmp / "gz", tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kCorruption,
                          "train-images-idx3-ubyte.gz: truncated while reading image 0"));
  EXPECT_EQ(DirEntries(tmp.path()), std::vector<std::string>{"gz"});  // no temporary file left
}

// The real data set from Debian's dataset-fashion-mnist package.
TEST(PackIdxTest, FashionMnistFromDebianPackage) {
  const std::string src = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(src + "/train-labels-idx1-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  TempDir tmp;
  auto stats = PackQuiet(src, tmp / "f.dlfs");
  ASSERT_OK(stats);
  EXPECT_EQ(stats->samples, 70000u);
  EXPECT_EQ(stats->bytes, 70000u * 784);
  EXPECT_EQ(stats->classes, 10u);
  auto v = Volume::Open(tmp / "f.dlfs");
  ASSERT_OK(v);
  const SampleDirectory& d = (*v)->directory();

  // Labels and pixels read independently from the IDX files.
  for (auto [file, split, n] :
       {std::tuple{"train", "train", 60000u}, std::tuple{"t10k", "test", 10000u}}) {
    gzFile lf = gzopen((src + "/" + file + "-labels-idx1-ubyte.gz").c_str(), "rb");
    gzFile imf = gzopen((src + "/" + file + "-images-idx3-ubyte.gz").c_str(), "rb");
    ASSERT_TRUE(lf && imf);
    std::vector<unsigned char> labels(8 + n), images(16 + size_t{n} * 784);
    ASSERT_EQ(gzread(lf, labels.data(), labels.size()), static_cast<int>(labels.size()));
    ASSERT_EQ(gzread(imf, images.data(), images.size()), static_cast<int>(images.size()));
    gzclose(lf);
    gzclose(imf);
    const uint64_t dir = d.Resolve(split)->index;
    const std::vector<uint64_t> in_dir = d.DirSamples(dir);
    ASSERT_EQ(d.dir(dir).sample_count, n);
    ASSERT_EQ(in_dir.size(), n);
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t idx = in_dir[i];
      char name[32];
      std::snprintf(name, sizeof name, "%s/%05u", split, i);
      ASSERT_EQ(d.Path(idx), name);
      ASSERT_EQ(d.label(idx), labels[8 + i]) << name;
      if (i % 997 == 0) {
        auto bytes = (*v)->Read(idx);
        ASSERT_OK(bytes);
        ASSERT_EQ(std::memcmp(bytes->data(), images.data() + 16 + size_t{i} * 784, 784), 0);
      }
    }
  }
}

// ---- Tar shards ----------------------------------------------------------------

void WriteTar(const std::string& path,
              const std::vector<std::pair<std::string, std::string>>& members, bool gzip) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (gzip) archive_write_add_filter_gzip(a);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
  for (const auto& [name, data] : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_write_header(a, e);
    archive_write_data(a, data.data(), data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

// A member of any type, for archives with links and special files.
struct TarEntry {
  std::string name;
  std::string data;
  unsigned type = AE_IFREG;
  std::string hardlink;  // makes it a hard link (GNU/POSIX: no data of its own)
  std::string symlink;
};

void WriteTarEntries(const std::string& path, const std::vector<TarEntry>& members) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  archive* a = archive_write_new();
  archive_write_set_format_gnutar(a);  // as GNU tar writes hard-linked files
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
  for (const TarEntry& m : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, m.name.c_str());
    archive_entry_set_filetype(e, m.type);
    archive_entry_set_perm(e, 0644);
    if (!m.hardlink.empty()) archive_entry_set_hardlink(e, m.hardlink.c_str());
    if (!m.symlink.empty()) archive_entry_set_symlink(e, m.symlink.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(m.data.size()));
    ASSERT_EQ(archive_write_header(a, e), ARCHIVE_OK) << m.name;
    if (!m.data.empty()) archive_write_data(a, m.data.data(), m.data.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

// Reads every field of every sample of `vol` into {"key.field": (bytes,
// label)} (the key alone for the unnamed field): what the tar held.
std::map<std::string, std::pair<std::string, uint32_t>> VolumeContents(const std::string& vol) {
  std::map<std::string, std::pair<std::string, uint32_t>> out;
  auto v = Volume::Open(vol);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  if (!v.ok()) return out;
  const SampleDirectory& d = (*v)->directory();
  for (uint64_t i = 0; i < d.size(); ++i) {
    auto fields = (*v)->ReadFields(i);
    EXPECT_TRUE(fields.ok()) << fields.status().ToString();
    if (!fields.ok()) continue;
    for (const auto& [name, bytes] : *fields) {
      out[d.Path(i) + (name.empty() ? "" : "." + name)] = {
          std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()), d.label(i)};
    }
  }
  return out;
}

TEST(PackTarTest, WebDatasetKeysAndClsLabels) {
  TempDir tmp;
  std::filesystem::create_directories(tmp / "shards");
  WriteTar(tmp / "shards/shard-000.tar",
           {{"./s/000.cls", "3\n"},
            {"./s/000.jpg", "jpeg-0"},
            {"s/001.cls", " 7 "},
            {"s/001.jpg", "jpeg-1"},
            {"s/001.json", "{}"},
            {"s/002.png", "png-2"}},
           false);
  WriteTar(tmp / "shards/shard-001.tar.gz", {{"t/100.seg.png", "seg"}, {"t/100.cls", "1"}}, true);
  auto stats = PackQuiet(tmp / "shards", tmp / "v.dlfs");
  ASSERT_OK(stats);
  EXPECT_EQ(stats->from, SourceKind::kTar);
  EXPECT_EQ(stats->samples, 4u);  // one per key
  auto v = Volume::Open(tmp / "v.dlfs");
  ASSERT_OK(v);
  const SampleDirectory& d = (*v)->directory();
  const std::vector<std::tuple<std::string, std::string, std::string, uint32_t>> want = {
      {"s/000", "jpg", "jpeg-0", 3},  {"s/000", "cls", "3\n", 3},
      {"s/001", "jpg", "jpeg-1", 7},  {"s/001", "json", "{}", 7},
      {"s/001", "cls", " 7 ", 7},     {"s/002", "png", "png-2", kNoLabel},
      {"t/100", "seg.png", "seg", 1}, {"t/100", "cls", "1", 1}};
  for (const auto& [key, field, data, label] : want) {
    auto idx = d.Lookup(key);
    ASSERT_OK(idx) << key;
    EXPECT_EQ(*(*v)->Read(*idx, field), Bytes(data)) << key << "." << field;
    EXPECT_EQ(d.label(*idx), label) << key;
  }
  EXPECT_THAT(d.Lookup("s/000.jpg"),
              StatusIs(StatusCode::kNotFound, "no sample or directory 's/000.jpg'"));
  EXPECT_EQ((*v)->Read(*d.Lookup("s/002"), "jpg").status().code(), StatusCode::kNotFound);

  // --fields keeps some fields; labels still come from .cls.
  PackOptions only;
  only.fields = {"jpg"};
  stats = PackQuiet(tmp / "shards", tmp / "jpg.dlfs", only);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->samples, 2u);  // s/002 and t/100 have no jpg
  EXPECT_EQ(VolumeContents(tmp / "jpg.dlfs"),
            (std::map<std::string, std::pair<std::string, uint32_t>>{
                {"s/000.jpg", {"jpeg-0", 3}}, {"s/001.jpg", {"jpeg-1", 7}}}));
  auto jv = Volume::Open(tmp / "jpg.dlfs");
  ASSERT_OK(jv);
  // One raw field per sample: no per-sample field records (single layout).
  EXPECT_EQ((*jv)->info().incompat_flags, 1u);
}

// A key's members spread over shards, in any order, make one sample; a key
// with a field twice is an error naming both shards.
TEST(PackTarTest, KeysSplitOverShardsAndDuplicateFields) {
  TempDir tmp;
  WriteTar(tmp / "shards/a.tar", {{"k1.jpg", "J1"}, {"k2.jpg", "J2"}, {"k1.cls", "1"}}, false);
  WriteTar(tmp / "shards/b.tar.gz", {{"k2.json", "{2}"}, {"k1.json", "{1}"}, {"k3.txt", "t"}},
           true);
  auto stats = PackQuiet(tmp / "shards", tmp / "v.dlfs");
  ASSERT_OK(stats);
  EXPECT_EQ(stats->samples, 3u);
  EXPECT_EQ(VolumeContents(tmp / "v.dlfs"),
            (std::map<std::string, std::pair<std::string, uint32_t>>{{"k1.jpg", {"J1", 1}},
                                                                     {"k1.cls", {"1", 1}},
                                                                     {"k1.json", {"{1}", 1}},
                                                                     {"k2.jpg", {"J2", kNoLabel}},
                                                                     {"k2.json", {"{2}", kNoLabel}},
                                                                     {"k3.txt", {"t", kNoLabel}}}));
  WriteTar(tmp / "dup/a.tar", {{"k1.jpg", "J1"}}, false);
  WriteTar(tmp / "dup/b.tar", {{"k1.jpg", "again"}}, false);
  auto r = PackQuiet(tmp / "dup", tmp / "w.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument, "key 'k1' has two 'jpg' members: in " +
                                                            (tmp / "dup/a.tar") + " and in " +
                                                            (tmp / "dup/b.tar")));
  EXPECT_FALSE(std::filesystem::exists(tmp / "w.dlfs"));
}

TEST(PackTarTest, ProgressCountsShardBytes) {
  TempDir tmp;
  WriteTar(tmp / "shards/a.tar", {{"k/1.jpg", "one"}}, false);
  WriteTar(tmp / "shards/b.tar", {{"k/2.jpg", std::string(20000, 'x')}}, false);
  PackOptions o;
  std::vector<PackProgress> reports;
  o.on_progress = [&](const PackProgress& p) { reports.push_back(p); };
  ASSERT_OK(PackQuiet(tmp / "shards", tmp / "v.dlfs", o));
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.front().total_source_bytes,
            std::filesystem::file_size(tmp / "shards/a.tar") +
                std::filesystem::file_size(tmp / "shards/b.tar"));
  EXPECT_EQ(reports.front().source_bytes, 0u);  // still in the first shard
  EXPECT_EQ(reports.front().total_samples, 0u);
}

TEST(PackTarTest, BadShardsAreNamed) {
  TempDir tmp;
  WriteTar(tmp / "bad-cls.tar", {{"a.cls", "cat"}, {"a.jpg", "x"}}, false);
  auto r = PackQuiet(tmp / "bad-cls.tar", tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                          "bad-cls.tar: member 'a.cls' is not a class number"));

  WriteTar(tmp / "cut.tar", {{"a.jpg", std::string(5000, 'x')}, {"b.jpg", std::string(5000, 'y')}},
           false);
  std::filesystem::resize_file(tmp / "cut.tar", 3000);
  r = PackQuiet(tmp / "cut.tar", tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kCorruption, "cut.tar: member 'a.jpg' declares 5000 bytes"));

  testing::WriteFile(tmp / "junk.tar", testing::RandomBytes(4096, 9));
  r = PackQuiet(tmp / "junk.tar", tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kIOError, "junk.tar: "));
  EXPECT_FALSE(std::filesystem::exists(tmp / "v.dlfs"));
}

// Issue 13 #6: members of one key that are not adjacent still share the
// key's label, wherever they sit: before or after it, in another shard.
TEST(PackTarTest, LabelsJoinByKeyWhereverTheMembersSit) {
  TempDir tmp;
  WriteTar(tmp / "shards/a.tar",
           {{"s/001.cls", "1"},
            {"s/000.cls", "0"},
            {"s/000.jpg", "zero"},
            {"s/001.jpg", "one"},  // its .cls came two members earlier
            {"s/002.jpg", "two"},  // its .cls is in the next shard
            {"s/003.jpg", "three"}},
           false);
  WriteTar(tmp / "shards/b.tar.gz", {{"s/002.cls", "2"}, {"s/003.txt", "no class"}}, true);
  auto stats = PackQuiet(tmp / "shards", tmp / "v.dlfs");
  ASSERT_OK(stats);
  EXPECT_EQ(stats->samples, 4u);
  EXPECT_EQ(stats->classes, 3u);
  const auto got = VolumeContents(tmp / "v.dlfs");
  const std::map<std::string, std::pair<std::string, uint32_t>> want = {
      {"s/000.jpg", {"zero", 0}},         {"s/000.cls", {"0", 0}},
      {"s/001.jpg", {"one", 1}},          {"s/001.cls", {"1", 1}},
      {"s/002.jpg", {"two", 2}},          {"s/002.cls", {"2", 2}},
      {"s/003.jpg", {"three", kNoLabel}}, {"s/003.txt", {"no class", kNoLabel}}};
  EXPECT_EQ(got, want);

  // Two .cls members of one key are a field given twice: an error.
  WriteTar(tmp / "two.tar", {{"k.cls", "1"}, {"k.jpg", "x"}, {"k.cls", "4"}}, false);
  auto r = PackQuiet(tmp / "two.tar", tmp / "w.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                          "key 'k' has two 'cls' members: both in " + (tmp / "two.tar")));
}

// The key rule and the index over shards that a multi-field importer uses.
TEST(PackTarTest, KeyIndexGroupsMembersAcrossShards) {
  using pack_internal::TarKeyIndex;
  using pack_internal::WebDatasetExtension;
  using pack_internal::WebDatasetKey;
  EXPECT_EQ(WebDatasetKey("a/b.c/x.seg.png"), "a/b.c/x");
  EXPECT_EQ(WebDatasetExtension("a/b.c/x.seg.png"), ".seg.png");
  EXPECT_EQ(WebDatasetKey("noext"), "noext");
  EXPECT_EQ(WebDatasetExtension("noext"), "");
  TempDir tmp;
  WriteTar(tmp / "0.tar", {{"./k1.jpg", "a"}, {"k2.jpg", "b"}, {"k1.cls", "1"}}, false);
  WriteTar(tmp / "1.tar.gz", {{"k2.cls", "2"}, {"k1.json", "{}"}}, true);
  auto index = TarKeyIndex::Build({tmp / "0.tar", tmp / "1.tar.gz"});
  ASSERT_OK(index);
  EXPECT_EQ(index->keys(), (std::vector<std::string>{"k1", "k2"}));
  std::vector<std::tuple<uint32_t, uint64_t, std::string>> k1;
  for (uint32_t id : index->MembersOf("k1")) {
    const auto& m = index->member(id);
    k1.emplace_back(m.shard, m.ordinal, m.path);
  }
  EXPECT_EQ(k1, (std::vector<std::tuple<uint32_t, uint64_t, std::string>>{
                    {0, 0, "k1.jpg"}, {0, 2, "k1.cls"}, {1, 1, "k1.json"}}));
  EXPECT_EQ(index->MembersOf("k2").size(), 2u);
  EXPECT_TRUE(index->MembersOf("k3").empty());
}

// Issue 13 #2: a 1 KiB tar whose header claims a 4 GiB - 1 member allocated
// and zero-filled 4.2 GB before "Truncated tar archive". Members now stream,
// and a declared size is checked against an uncompressed archive first.
TEST(PackTarTest, DeclaredSizeBeyondTheArchiveIsRefused) {
  TempDir tmp;
  const std::string fixture = std::string(DLFS_TEST_DATA) + "/hostile/tar-4g-member.tar";
  auto r = PackQuiet(fixture, tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kCorruption,
                          fixture + ": member 's/000.jpg' declares 4294967295 bytes, but the "
                                    "archive has only 1024 bytes from its header on"));
  // Compressed, the size cannot be checked up front: the member streams
  // until the data ends.
  {
    auto bytes = testing::ReadFile(fixture);
    gzFile f = gzopen((tmp / "c.tar.gz").c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  }
  r = PackQuiet(tmp / "c.tar.gz", tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kIOError, "c.tar.gz: member 's/000.jpg'"));
  EXPECT_EQ(DirEntries(tmp.path()), std::vector<std::string>{"c.tar.gz"});
}

// Issue 13 #7: hard links (GNU tar of hard-linked files) were dropped, and
// symlinks and FIFOs too, without a word.
TEST(PackTarTest, HardLinksGetTheirTargetsBytesOtherSpecialMembersAreRefused) {
  TempDir tmp;
  WriteTarEntries(tmp / "links.tar", {{"d", "", AE_IFDIR},
                                      {"d/a.jpg", "bytes of a"},
                                      {"d/a.cls", "5"},
                                      {"d/b.jpg", "", AE_IFREG, "d/a.jpg"},  // hard link to a.jpg
                                      {"d/b.cls", "", AE_IFREG, "d/a.cls"},  // a deduplicated .cls
                                      {"d/c.jpg", "", AE_IFREG, "d/b.jpg"},  // a link to a link
                                      {"d/e.jpg", "bytes of e"},
                                      {"d/f.jpg", "", AE_IFREG, "./d/e.jpg"}});
  auto stats = PackQuiet(tmp / "links.tar", tmp / "v.dlfs");
  ASSERT_OK(stats);
  const std::map<std::string, std::pair<std::string, uint32_t>> want = {
      {"d/a.jpg", {"bytes of a", 5}},        {"d/a.cls", {"5", 5}},
      {"d/b.jpg", {"bytes of a", 5}},        {"d/b.cls", {"5", 5}},
      {"d/c.jpg", {"bytes of a", kNoLabel}}, {"d/e.jpg", {"bytes of e", kNoLabel}},
      {"d/f.jpg", {"bytes of e", kNoLabel}}};
  EXPECT_EQ(VolumeContents(tmp / "v.dlfs"), want);

  WriteTarEntries(tmp / "special.tar", {{"x/a.jpg", "a"},
                                        {"x/l.jpg", "", AE_IFLNK, "", "a.jpg"},
                                        {"x/p.fifo", "", AE_IFIFO},
                                        {"x/z.jpg", "z"},
                                        {"x/dangling.jpg", "", AE_IFREG, "x/nothing.jpg"}});
  auto r = PackQuiet(tmp / "special.tar", tmp / "w.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                          "special.tar: member 'x/l.jpg' is a symbolic link; only "
                          "regular files and hard links are packed (set "
                          "skip_unreadable"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "w.dlfs"));
  PackOptions skip;
  skip.skip_unreadable = true;
  stats = PackQuiet(tmp / "special.tar", tmp / "w.dlfs", skip);
  ASSERT_OK(stats);
  EXPECT_EQ(stats->samples, 2u);
  EXPECT_EQ(stats->skipped, 3u);
  ASSERT_EQ(stats->skipped_examples.size(), 3u);
  EXPECT_NE(stats->skipped_examples[1].find("member 'x/p.fifo' is a special file"),
            std::string::npos);
  EXPECT_NE(
      stats->skipped_examples[2].find("member 'x/dangling.jpg' is a hard link to "
                                      "'x/nothing.jpg', which is not an earlier regular file"),
      std::string::npos)
      << stats->skipped_examples[2];
}

// Issue 13 #10: "/etc/passwd.jpg" was stored as "etc/passwd.jpg".
TEST(PackTarTest, AbsoluteAndDotDotMemberNamesAreRefused) {
  TempDir tmp;
  for (const std::string name : {"/etc/passwd.jpg", "../up.jpg", "a/../../b.jpg", "a/.."}) {
    WriteTarEntries(tmp / "bad.tar", {{"ok.jpg", "fine"}, {name, "x"}});
    PackOptions skip;
    skip.skip_unreadable = true;  // not a matter of reading: refused even so
    auto r = PackQuiet(tmp / "bad.tar", tmp / "v.dlfs", skip);
    ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument, "bad.tar: member '" + name + "' has"))
        << name;
    EXPECT_FALSE(std::filesystem::exists(tmp / "v.dlfs"));
  }
  // The builder refuses an absolute path too, whoever calls it.
  ASSERT_OK_AND_ASSIGN(auto b, VolumeBuilder::Create(tmp / "b.dlfs"));
  EXPECT_EQ(b->Add("/etc/passwd", Bytes("x")).code(), StatusCode::kInvalidArgument);
}

TEST(PackTarTest, DuplicatePathAcrossShardsNamesBothShards) {
  TempDir tmp;
  WriteTar(tmp / "shards/a.tar", {{"k/1.jpg", "one"}, {"k/2.jpg", "two"}}, false);
  WriteTar(tmp / "shards/b.tar", {{"k/3.jpg", "three"}, {"k/2.jpg", "again"}}, false);
  auto r = PackQuiet(tmp / "shards", tmp / "v.dlfs");
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument, "b.tar"));
  const std::string msg = r.status().message();
  // Found while planning the keys, before any byte is written (format v2:
  // the key 'k/2' with the field 'jpg').
  EXPECT_NE(msg.find("key 'k/2' has two 'jpg' members: in " + std::string(tmp / "shards/a.tar") +
                     " and in " + std::string(tmp / "shards/b.tar")),
            std::string::npos)
      << msg;
  EXPECT_FALSE(std::filesystem::exists(tmp / "v.dlfs"));
}

TEST(PackTest, DetectsSourceKinds) {
  TempDir tmp;
  testing::WriteFile(tmp / "tree/a/1.png", Bytes("1"));
  WriteIdx(tmp / "idx", "train", 1, 1, 1, true);
  WriteTar(tmp / "tars/x.tar", {{"a.jpg", "1"}}, false);
  EXPECT_EQ(*DetectSourceKind(tmp / "tree"), SourceKind::kImageFolder);
  EXPECT_EQ(*DetectSourceKind(tmp / "idx"), SourceKind::kIdx);
  EXPECT_EQ(*DetectSourceKind(tmp / "tars"), SourceKind::kTar);
  EXPECT_EQ(*DetectSourceKind(tmp / "tars/x.tar"), SourceKind::kTar);
  EXPECT_EQ(DetectSourceKind(tmp / "missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(DetectSourceKind(tmp / "tree/a/1.png").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSourceKind("zip").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseSourceKind("lmdb"), SourceKind::kLmdb);
}

}  // namespace pack_test
}  // namespace dlfs
