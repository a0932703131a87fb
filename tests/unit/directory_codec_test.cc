// The directory region codec on its own, without files: the worked example
// of docs/format.md §7 byte for byte, encode -> decode round trips, the
// writer's refusals, and one table row per reader check of §5 (26-41).
#include "format/directory_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "common/crc32c.h"
#include "dlfs/directory.h"
#include "testutil.h"

namespace dlfs::format {
namespace directory_codec_test {

using testing::StatusIs;

// A writer's tree, built like VolumeBuilder builds one: directories are
// created on first use, in insertion order.
class TestTree {
 public:
  void Add(std::string_view path, uint64_t offset, uint32_t length, uint32_t crc, uint32_t label,
           uint32_t target = 0) {
    const size_t slash = path.rfind('/');
    const uint32_t dir = slash == path.npos ? 0 : Dir(path.substr(0, slash));
    const std::string_view name = slash == path.npos ? path : path.substr(slash + 1);
    samples_.push_back(
        TreeSample{offset, target, length, crc, label, dir, Intern(name), uint32_t(name.size())});
    if (label != kNone) class_count = std::max<uint64_t>(class_count, label + 1);
  }

  DirectoryTree view() const {
    return DirectoryTree{names_, dirs_, samples_, class_names,
                         std::max<uint64_t>(class_count, class_names.size())};
  }

  std::vector<std::string> class_names;
  uint64_t class_count = 0;

 private:
  uint32_t Dir(std::string_view path) {
    if (auto it = ids_.find(std::string(path)); it != ids_.end()) return it->second;
    const size_t slash = path.rfind('/');
    const uint32_t parent = slash == path.npos ? 0 : Dir(path.substr(0, slash));
    const std::string_view name = slash == path.npos ? path : path.substr(slash + 1);
    dirs_.push_back(TreeDir{parent, Intern(name), uint32_t(name.size())});
    return ids_[std::string(path)] = uint32_t(dirs_.size() - 1);
  }
  uint64_t Intern(std::string_view s) {
    names_.append(s);
    return names_.size() - s.size();
  }

  std::string names_;
  std::vector<TreeDir> dirs_{TreeDir{kNone, 0, 0}};
  std::vector<TreeSample> samples_;
  std::map<std::string, uint32_t> ids_{{"", 0}};
};

Result<std::vector<std::byte>> Encode(const TestTree& t) {
  DLFS_ASSIGN_OR_RETURN(const DirectoryOrder order, OrderDirectory(t.view()));
  return EncodeDirectory(t.view(), order);
}

std::vector<std::byte> FromHex(std::string_view hex) {
  std::vector<std::byte> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = std::byte(std::stoi(std::string(hex.substr(2 * i, 2)), nullptr, 16));
  }
  return out;
}

std::string Hex(const std::vector<std::byte>& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::byte b : bytes) {
    out += kDigits[std::to_integer<int>(b) >> 4];
    out += kDigits[std::to_integer<int>(b) & 15];
  }
  return out;
}

// docs/format.md §7: the tree in the order the ImageFolder importer adds it,
// with the offsets and CRCs of `dlfs pack --align 8`.
TestTree WorkedExample() {
  TestTree t;
  t.class_names = {"cat", "dog"};
  t.Add("README", 4096, 6, 0x353dd8be, kNone);
  t.Add("cat/1.jpg", 4104, 3, 0x364b3fb7, 0);
  t.Add("cat/2.jpg", 4112, 5, 0xd33e9218, 0);
  t.Add("cat/kittens/3.jpg", 4120, 3, 0x3d6d3c5d, 0);
  t.Add("dog/1.jpg", 4128, 4, 0x8e82734c, 1);
  return t;
}

SampleDirectory::Expected WorkedExampleExpected() {
  SampleDirectory::Expected x;
  x.sample_count = 5;
  x.dir_count = 4;
  x.class_count = 2;
  x.data_bytes = 21;
  x.data_alignment = 8;
  x.data_regions = {{4096, 4096 + 36}};
  return x;
}

// The 477 bytes of `xxd -s 8192 -l 477 ex.dlfs` in docs/format.md §7.
const std::vector<std::byte> kWorkedExampleRegion = FromHex(
    "444c4452800000000500000000000000040000000000000002000000000000002d0000000000000080000000000000"
    "00"
    "2001000000000000a001000000000000b0010000000000002000000020000000080000000000000000000000000000"
    "00"
    "0000000000000000000000000000000000000000000000000000000000000000001000000000000006000000bed83d"
    "35"
    "ffffffff000000000d00000006000000081000000000000003000000b73f4b36000000000100000013000000050000"
    "00"
    "10100000000000000500000018923ed3000000000100000018000000050000002010000000000000040000004c7382"
    "8e"
    "01000000020000001d000000050000001810000000000000030000005d3c6d3d000000000300000022000000050000"
    "00"
    "ffffffff00000000000000000100000002000000000000000100000000000000000000000000000003000000030000"
    "00"
    "0100000001000000020000000000000000000000030000000300000004000000000000000300000001000000000000"
    "00"
    "010000000600000007000000040000000000000004000000010000000000000027000000030000002a000000030000"
    "00"
    "636174646f676b697474656e73524541444d45312e6a7067322e6a7067312e6a7067332e6a7067636174646f67");

// A view over bytes the test owns, as Volume::Open builds one.
Result<SampleDirectory> View(const std::vector<std::byte>& bytes,
                             const SampleDirectory::Expected& x) {
  auto holder = std::make_shared<std::vector<std::byte>>(bytes);
  return SampleDirectory::Create(std::shared_ptr<const std::byte>(holder, holder->data()),
                                 holder->size(), x, "v.dlfs");
}

TEST(DirectoryCodecTest, EncodesTheWorkedExampleOfTheSpec) {
  ASSERT_EQ(kWorkedExampleRegion.size(), 477u);
  ASSERT_OK_AND_ASSIGN(const std::vector<std::byte> region, Encode(WorkedExample()));
  EXPECT_EQ(Hex(region), Hex(kWorkedExampleRegion));
  EXPECT_EQ(crc32c::Value(region.data(), region.size()), 0x3b8b7a10u);  // regions[1].crc32c

  // §7 "Lookup of cat/kittens/3.jpg".
  ASSERT_OK_AND_ASSIGN(const SampleDirectory d, View(region, WorkedExampleExpected()));
  ASSERT_OK_AND_ASSIGN(const uint64_t i, d.Lookup("cat/kittens/3.jpg"));
  EXPECT_EQ(i, 4u);
  EXPECT_EQ(d.sample(i).offset, 4120u);
  EXPECT_EQ(d.sample(i).crc32c, 0x3d6d3c5du);
}

TEST(DirectoryCodecTest, EncodingDoesNotDependOnInsertionOrder) {
  const std::vector<std::string> paths = {"b/z", "a", "b/c/d", "b/a", "c/x/y/z", "B", "b/c/a"};
  std::vector<std::byte> first;
  std::mt19937 rng(1);
  for (int round = 0; round < 20; ++round) {
    std::vector<size_t> idx(paths.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng);
    TestTree t;
    // Offsets and labels go with the path, not with the insertion position.
    for (size_t i : idx) t.Add(paths[i], 4096 + 10 * i, uint32_t(i), uint32_t(i * 7), i % 3);
    ASSERT_OK_AND_ASSIGN(std::vector<std::byte> region, Encode(t));
    if (round == 0) first = region;
    EXPECT_EQ(Hex(region), Hex(first)) << "round " << round;
  }
}

// Random trees over several targets: what is encoded decodes, and every
// sample comes back under its path with its own entry.
TEST(DirectoryCodecTest, RandomTreesRoundTrip) {
  std::mt19937 rng(42);
  const std::vector<std::string> parts = {"a", "b", "Z", "ab", "\xc3\xa9t\xc3\xa9", "0", "a b"};
  for (int round = 0; round < 10; ++round) {
    struct Want {
      uint64_t offset;
      uint32_t length, crc, label, target;
    };
    std::map<std::string, Want> model;
    std::set<std::string> dirs;
    const size_t n = 1 + rng() % 400;
    const uint32_t targets = 1 + rng() % 3;
    std::vector<uint64_t> end(targets, 4096);
    while (model.size() < n) {
      std::string path;
      for (int k = rng() % 4; k > 0; --k) path += "d" + parts[rng() % parts.size()] + "/";
      path += parts[rng() % parts.size()] + std::to_string(rng() % 50);
      bool clash = dirs.count(path) || model.count(path);
      for (size_t p = path.find('/'); p != path.npos; p = path.find('/', p + 1)) {
        clash = clash || model.count(path.substr(0, p));
      }
      if (clash) continue;
      for (size_t p = path.find('/'); p != path.npos; p = path.find('/', p + 1)) {
        dirs.insert(path.substr(0, p));
      }
      const uint32_t t = rng() % targets, len = rng() % 100;
      const uint32_t label = rng() % 5 == 0 ? kNone : uint32_t(rng() % 6);
      model[path] = Want{end[t], len, uint32_t(rng()), label, t};
      end[t] += len;
    }
    std::vector<std::string> order;
    for (const auto& [p, w] : model) order.push_back(p);
    std::shuffle(order.begin(), order.end(), rng);
    TestTree tree;
    tree.class_names = {"zero", "one"};
    uint64_t data_bytes = 0;
    for (const std::string& p : order) {
      const Want& w = model[p];
      tree.Add(p, w.offset, w.length, w.crc, w.label, w.target);
      data_bytes += w.length;
    }
    ASSERT_OK_AND_ASSIGN(const std::vector<std::byte> region, Encode(tree));

    SampleDirectory::Expected x;
    x.sample_count = model.size();
    x.dir_count = dirs.size() + 1;
    x.class_count = tree.view().class_count;
    x.data_bytes = data_bytes;
    for (uint64_t e : end) x.data_regions.push_back({4096, e});
    ASSERT_OK_AND_ASSIGN(const SampleDirectory d, View(region, x));
    for (const auto& [path, w] : model) {
      ASSERT_OK_AND_ASSIGN(const uint64_t i, d.Lookup(path));
      EXPECT_EQ(d.Path(i), path);
      const SampleInfo s = d.sample(i);
      EXPECT_EQ(s.offset, w.offset) << path;
      EXPECT_EQ(s.length, w.length) << path;
      EXPECT_EQ(s.crc32c, w.crc) << path;
      EXPECT_EQ(s.label, w.label) << path;
      EXPECT_EQ(s.target, w.target) << path;
    }
    for (const std::string& dir : dirs) {
      ASSERT_OK_AND_ASSIGN(const PathEntry e, d.Resolve(dir));
      EXPECT_TRUE(e.is_dir) << dir;
    }
    ASSERT_GE(d.class_count(), 2u);
    EXPECT_EQ(d.class_name(0), "zero");
    EXPECT_EQ(d.class_name(1), "one");
    for (uint64_t c = 2; c < d.class_count(); ++c) EXPECT_EQ(d.class_name(c), std::to_string(c));
  }
}

TEST(DirectoryCodecTest, OrderRefusesTwoSamplesWithOnePath) {
  TestTree t;
  t.Add("x/a.jpg", 4096, 1, 0, 0);
  t.Add("x/b.jpg", 4097, 1, 0, 0);
  t.Add("x/a.jpg", 4098, 1, 0, 0);
  const auto order = OrderDirectory(t.view());
  ASSERT_THAT(order, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(order.status().message(), "two samples have the path 'x/a.jpg'");
}

TEST(DirectoryCodecTest, OrderRefusesANameThatIsSampleAndDirectory) {
  TestTree t;
  t.Add("y/c", 4096, 1, 0, 0);
  t.Add("x/a/b.jpg", 4097, 1, 0, 0);
  t.Add("x/a", 4098, 1, 0, 0);
  const auto order = OrderDirectory(t.view());
  ASSERT_THAT(order, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(order.status().message(), "'x/a' is both a sample and a directory");
}

TEST(DirectoryCodecTest, EmptyTreeIsARootAlone) {
  TestTree t;
  ASSERT_OK_AND_ASSIGN(const std::vector<std::byte> region, Encode(t));
  EXPECT_EQ(region.size(), kDirectoryHeaderSize + sizeof(DirEntry));
  SampleDirectory::Expected x;
  x.dir_count = 1;
  x.data_regions = {{4096, 4096}};
  ASSERT_OK_AND_ASSIGN(const SampleDirectory d, View(region, x));
  EXPECT_EQ(d.size(), 0u);
  EXPECT_EQ(d.Lookup("a").status().code(), StatusCode::kNotFound);
}

// ---- One mutation per reader check ------------------------------------------

// The worked example's region and what its superblock says, to damage.
struct Damaged {
  std::vector<std::byte> bytes = kWorkedExampleRegion;
  uint64_t size = kWorkedExampleRegion.size();
  SampleDirectory::Expected x = WorkedExampleExpected();

  template <typename T>
  void Edit(uint64_t offset, const std::function<void(T&)>& f) {
    T v;
    std::memcpy(&v, bytes.data() + offset, sizeof v);
    f(v);
    std::memcpy(bytes.data() + offset, &v, sizeof v);
  }
  DirectoryHeader header() const {
    DirectoryHeader h;
    std::memcpy(&h, bytes.data(), sizeof h);
    return h;
  }
  void Header(const std::function<void(DirectoryHeader&)>& f) { Edit<DirectoryHeader>(0, f); }
  void Sample(uint64_t i, const std::function<void(SampleEntry&)>& f) {
    Edit<SampleEntry>(header().samples_offset + i * sizeof(SampleEntry), f);
  }
  void Dir(uint64_t k, const std::function<void(DirEntry&)>& f) {
    Edit<DirEntry>(header().dirs_offset + k * sizeof(DirEntry), f);
  }
  void Class(uint64_t c, const std::function<void(ClassEntry&)>& f) {
    Edit<ClassEntry>(header().classes_offset + c * sizeof(ClassEntry), f);
  }
  void PoolByte(uint64_t off, char c) { bytes[header().strings_offset + off] = std::byte(c); }
};

struct Mutation {
  const char* what;
  int check;  // docs/format.md §5
  std::function<void(Damaged&)> apply;
  const char* message;  // expected after "v.dlfs: directory region: "
};

// The example: dirs 0 root, 1 cat, 2 dog, 3 cat/kittens; samples 0 README,
// 1 cat/1.jpg, 2 cat/2.jpg, 3 dog/1.jpg, 4 cat/kittens/3.jpg; pool "catdog
// kittensREADME1.jpg2.jpg1.jpg3.jpgcatdog" (45 bytes).
const std::vector<Mutation> kMutations = {
    {"shorter than the header", 26, [](Damaged& d) { d.size = kDirectoryHeaderSize - 1; },
     "shorter than its header"},
    {"magic", 27, [](Damaged& d) { d.Header([](auto& h) { h.magic ^= 1; }); }, "bad magic"},
    {"header_size", 28, [](Damaged& d) { d.Header([](auto& h) { h.header_size = 64; }); },
     "unexpected header size"},
    {"sample_entry_size", 29,
     [](Damaged& d) { d.Header([](auto& h) { h.sample_entry_size = 24; }); },
     "unexpected entry sizes"},
    {"dir_entry_size", 29, [](Damaged& d) { d.Header([](auto& h) { h.dir_entry_size = 40; }); },
     "unexpected entry sizes"},
    {"class_entry_size", 29, [](Damaged& d) { d.Header([](auto& h) { h.class_entry_size = 16; }); },
     "unexpected entry sizes"},
    {"sample_count", 30, [](Damaged& d) { d.Header([](auto& h) { h.sample_count = 4; }); },
     "entry counts disagree with the superblock"},
    {"dir_count", 30, [](Damaged& d) { d.Header([](auto& h) { h.dir_count = 5; }); },
     "entry counts disagree with the superblock"},
    {"class_count", 30, [](Damaged& d) { d.Header([](auto& h) { h.class_count = 3; }); },
     "entry counts disagree with the superblock"},
    {"superblock's data_bytes", 40, [](Damaged& d) { d.x.data_bytes = 22; },
     "sample lengths add up to 21 bytes, the superblock says 22"},
    {"dir_count 0 in both", 31,
     [](Damaged& d) {
       d.Header([](auto& h) { h.dir_count = 0; });
       d.x.dir_count = 0;
     },
     "entry counts out of range"},
    {"sample_count kNone in both", 31,
     [](Damaged& d) {
       d.Header([](auto& h) { h.sample_count = kNone; });
       d.x.sample_count = kNone;
     },
     "entry counts out of range"},
    {"samples_offset inside the header", 32,
     [](Damaged& d) { d.Header([](auto& h) { h.samples_offset = 120; }); },
     "arrays overlap or are out of order"},
    {"dirs_offset inside the samples", 32,
     [](Damaged& d) { d.Header([](auto& h) { h.dirs_offset -= 8; }); },
     "arrays overlap or are out of order"},
    {"classes_offset inside the dirs", 32,
     [](Damaged& d) { d.Header([](auto& h) { h.classes_offset -= 8; }); },
     "arrays overlap or are out of order"},
    {"strings_offset inside the classes", 32,
     [](Damaged& d) { d.Header([](auto& h) { h.strings_offset -= 1; }); },
     "arrays overlap or are out of order"},
    {"dirs_offset past the end", 32,
     [](Damaged& d) { d.Header([](auto& h) { h.dirs_offset = 1u << 20; }); },
     "arrays overlap or are out of order"},
    {"classes_offset not a multiple of 8", 33,
     [](Damaged& d) {
       d.Header([](auto& h) {
         h.classes_offset += 4;  // and the pool after it, so only the alignment is wrong
         h.strings_offset += 4;
         h.string_bytes -= 4;
       });
     },
     "an array lies outside the region"},
    {"strings_offset past the end", 33,
     [](Damaged& d) { d.Header([](auto& h) { h.strings_offset = 478; }); },
     "an array lies outside the region"},
    {"string_bytes past the end", 33,
     [](Damaged& d) { d.Header([](auto& h) { h.string_bytes = 46; }); },
     "an array lies outside the region"},
    {"region cut short", 33, [](Damaged& d) { d.size = 476; }, "an array lies outside the region"},
    {"class name outside the pool", 34,
     [](Damaged& d) { d.Class(1, [](auto& c) { c.name_offset = 43; }); },
     "class 1 has its name outside the string pool"},
    {"root parent", 35, [](Damaged& d) { d.Dir(0, [](auto& e) { e.parent = 0; }); },
     "root entry is malformed"},
    {"root name_length", 35, [](Damaged& d) { d.Dir(0, [](auto& e) { e.name_length = 1; }); },
     "root entry is malformed"},
    {"root name_offset", 35, [](Damaged& d) { d.Dir(0, [](auto& e) { e.name_offset = 46; }); },
     "root entry is malformed"},
    {"parent not before the directory", 35,
     [](Damaged& d) { d.Dir(1, [](auto& e) { e.parent = 1; }); },
     "directory 1 has a bad parent or name"},
    {"empty directory name", 35, [](Damaged& d) { d.Dir(2, [](auto& e) { e.name_length = 0; }); },
     "directory 2 has a bad parent or name"},
    {"'/' in a directory name", 35, [](Damaged& d) { d.PoolByte(7, '/'); },
     "directory 3 has a bad parent or name"},
    {"directory name outside the pool", 35,
     [](Damaged& d) { d.Dir(3, [](auto& e) { e.name_offset = 40; }); },
     "directory 3 has a bad parent or name"},
    {"first_child", 36, [](Damaged& d) { d.Dir(0, [](auto& e) { e.first_child = 2; }); },
     "directory 0 has a bad child range"},
    {"child_count", 36, [](Damaged& d) { d.Dir(1, [](auto& e) { e.child_count = 2; }); },
     "directory 1 has a bad child range"},
    {"first_sample", 36, [](Damaged& d) { d.Dir(1, [](auto& e) { e.first_sample = 2; }); },
     "directory 1 has a bad sample range"},
    {"sample_count", 36, [](Damaged& d) { d.Dir(3, [](auto& e) { e.sample_count = 2; }); },
     "directory 3 has a bad sample range"},
    {"child's parent", 36, [](Damaged& d) { d.Dir(2, [](auto& e) { e.parent = 1; }); },
     "directory 0: child's parent link is wrong"},
    {"children out of order", 36,
     [](Damaged& d) {
       d.Dir(1, [](auto& e) { e.name_offset = 3; });  // "dog", like directory 2
     },
     "directory 0: children are not sorted by name"},
    {"a directory outside every child range", 37,
     [](Damaged& d) {
       d.Dir(1, [](auto& e) { e.child_count = 0; });
       d.Dir(2, [](auto& e) { e.first_child = 3; });
       d.Dir(3, [](auto& e) { e.first_child = 3; });
     },
     "some directories have no parent"},
    {"a sample outside every sample range", 38,
     [](Damaged& d) { d.Dir(3, [](auto& e) { e.sample_count = 0; }); },
     "some samples belong to no directory"},
    {"sample parent", 39, [](Damaged& d) { d.Sample(1, [](auto& s) { s.parent = 0; }); },
     "sample 1 has a wrong parent"},
    {"empty sample name", 39, [](Damaged& d) { d.Sample(0, [](auto& s) { s.name_length = 0; }); },
     "sample 0 has a bad name"},
    {"sample name outside the pool", 39,
     [](Damaged& d) { d.Sample(4, [](auto& s) { s.name_offset = 41; }); },
     "sample 4 has a bad name"},
    {"NUL in a sample name", 39, [](Damaged& d) { d.PoolByte(34, '\0'); },
     "sample 4 has a bad name"},
    {"'..' as a sample name", 39,
     [](Damaged& d) {
       d.PoolByte(34, '.');
       d.PoolByte(35, '.');
       d.Sample(4, [](auto& s) { s.name_length = 2; });
     },
     "sample 4 has a bad name"},
    {"samples out of order", 39,
     [](Damaged& d) { d.Sample(2, [](auto& s) { s.name_offset = 19; }); },
     "sample 2 is not sorted by name within its directory"},
    // The writer's bound holds on reading too, whatever class_count is
    // (format.md §4.6 rule 7); the message gives the sample's path.
    {"label of 2^24", 39, [](Damaged& d) { d.Sample(4, [](auto& s) { s.label = 1u << 24; }); },
     "sample 4 ('cat/kittens/3.jpg') has label 16777216: labels must be below 16777216"},
    {"label just below 'no label'", 39,
     [](Damaged& d) { d.Sample(3, [](auto& s) { s.label = kNone - 1; }); },
     "sample 3 ('dog/1.jpg') has label 4294967294: labels must be below 16777216"},
    {"label", 39, [](Damaged& d) { d.Sample(1, [](auto& s) { s.label = 2; }); },
     "sample 1 has label 2 but there are only 2 classes"},
    {"target", 39, [](Damaged& d) { d.Sample(3, [](auto& s) { s.target = 1; }); },
     "sample 3 names a missing target"},
    {"offset before the data region", 39,
     [](Damaged& d) { d.Sample(0, [](auto& s) { s.offset = 4088; }); },
     "sample 0 lies outside the data region"},
    {"length past the data region", 39,
     [](Damaged& d) { d.Sample(3, [](auto& s) { s.length = 5; }); },
     "sample 3 lies outside the data region"},
    {"offset past the data region", 39,
     [](Damaged& d) { d.Sample(3, [](auto& s) { s.offset = ~uint64_t{0} - 1; }); },
     "sample 3 lies outside the data region"},
    {"unaligned offset", 39, [](Damaged& d) { d.Sample(2, [](auto& s) { s.offset = 4113; }); },
     "sample 2 is not aligned to 8"},
    {"sample lengths", 40, [](Damaged& d) { d.Sample(0, [](auto& s) { s.length = 5; }); },
     "sample lengths add up to 20 bytes, the superblock says 21"},
    {"sample named like a sibling directory", 41,
     [](Damaged& d) {
       d.Sample(0, [](auto& s) {
         s.name_offset = 0;  // "cat"
         s.name_length = 3;
       });
     },
     "directory 0 has a sample and a sub-directory named 'cat'"},
};

TEST(DirectoryCodecTest, EveryMutationIsRefusedByItsCheck) {
  ASSERT_OK(DecodeDirectory(kWorkedExampleRegion.data(), kWorkedExampleRegion.size(),
                            WorkedExampleExpected(), "v.dlfs"));
  std::set<int> checks;
  for (const Mutation& m : kMutations) {
    SCOPED_TRACE(m.what);
    Damaged d;
    m.apply(d);
    const auto r = DecodeDirectory(d.bytes.data(), d.size, d.x, "v.dlfs");
    ASSERT_THAT(r, StatusIs(StatusCode::kCorruption)) << "accepted";
    EXPECT_EQ(r.status().message(), std::string("v.dlfs: directory region: ") + m.message);

    // Bytes that already passed in this job skip the per-entry checks
    // (34-41), never the header and bounds checks (26-33).
    d.x.already_validated = true;
    const auto trusted = DecodeDirectory(d.bytes.data(), d.size, d.x, "v.dlfs");
    EXPECT_EQ(trusted.ok(), m.check > 33) << trusted.status().ToString();
    checks.insert(m.check);
  }
  for (int c = 26; c <= 41; ++c) EXPECT_TRUE(checks.count(c)) << "no mutation for check " << c;
}

// ---- The images section (compat flag IMAGES, docs/format.md §4.9) ----------

// The worked example with an images section: records for cat/1.jpg (tree
// position 1) and cat/kittens/3.jpg (position 3, added before dog/1.jpg),
// given out of order.
struct WithImages {
  TestTree tree = WorkedExample();
  ImagesHeader header{};
  std::vector<TreeImage> records = {{3, 0, 3, kImageRecordResized, 640, 480},
                                    {1, 0, 1, 0, 300, 200}};
  WithImages() {
    header.image_count = 4;
    header.max_side = 256;
    header.filter = static_cast<uint8_t>(ImageFilterCode::kBilinear);
    header.mode = static_cast<uint8_t>(ImageModeCode::kRaw);
    header.color = 1;
  }
  Result<std::vector<std::byte>> Encode() const {
    DirectoryTree view = tree.view();
    view.images = &header;
    view.image_records = records;
    DLFS_ASSIGN_OR_RETURN(const DirectoryOrder order, OrderDirectory(view));
    return EncodeDirectory(view, order);
  }
  static SampleDirectory::Expected Expected() {
    SampleDirectory::Expected x = WorkedExampleExpected();
    x.compat_flags = kCompatImages;
    return x;
  }
};

TEST(DirectoryCodecTest, ImagesSectionRoundTripsAndOlderReadersSkipIt) {
  const WithImages w;
  ASSERT_OK_AND_ASSIGN(const std::vector<std::byte> region, w.Encode());
  // The section sits between the classes and the pool, which moved up.
  DirectoryHeader h;
  std::memcpy(&h, region.data(), sizeof h);
  EXPECT_EQ(h.images_offset, h.classes_offset + 2 * sizeof(ClassEntry));
  EXPECT_EQ(h.images_bytes, sizeof(ImagesHeader) + 2 * sizeof(ImageRecord));
  EXPECT_EQ(h.strings_offset, h.images_offset + h.images_bytes);
  EXPECT_EQ(region.size(), kWorkedExampleRegion.size() + h.images_bytes);

  ASSERT_OK_AND_ASSIGN(const SampleDirectory d, View(region, WithImages::Expected()));
  ASSERT_TRUE(d.images().has_value());
  const VolumeImages v = *d.images();
  EXPECT_EQ(v.images, 4u);
  EXPECT_EQ(v.changed, 2u);
  EXPECT_EQ(v.options.max_side, 256u);
  EXPECT_EQ(v.options.filter, ResizeFilter::kBilinear);
  EXPECT_EQ(v.options.mode, ImageStoreMode::kRaw);
  EXPECT_EQ(v.options.color, ColorMode::kRgb);
  // Records follow the samples to their indices: cat/1.jpg is 1, 3.jpg 4.
  ASSERT_OK_AND_ASSIGN(const uint64_t kitten, d.Lookup("cat/kittens/3.jpg"));
  const std::optional<ImageOrigin> o = d.FindImageOrigin(kitten);
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(o->stored, StoredImage::kRaw);
  EXPECT_TRUE(o->resized);
  EXPECT_EQ(o->width, 640u);
  EXPECT_EQ(o->height, 480u);
  ASSERT_TRUE(d.FindImageOrigin(1).has_value());
  EXPECT_EQ(d.FindImageOrigin(1)->stored, StoredImage::kJpeg);
  EXPECT_EQ(d.image_origin(0).sample, 1u);  // sorted by sample index
  EXPECT_EQ(d.image_origin(1).sample, kitten);
  EXPECT_FALSE(d.FindImageOrigin(2).has_value());
  EXPECT_FALSE(d.FindImageOrigin(1, 1).has_value());

  // A reader not told about IMAGES (an older one) sees the same tree and
  // no images: the section lies in a gap its checks allow.
  ASSERT_OK_AND_ASSIGN(const SampleDirectory old, View(region, WorkedExampleExpected()));
  EXPECT_FALSE(old.images().has_value());
  EXPECT_EQ(old.Lookup("cat/kittens/3.jpg").value(), kitten);
  EXPECT_EQ(old.sample(kitten).crc32c, d.sample(kitten).crc32c);
}

TEST(DirectoryCodecTest, EveryImagesMutationIsRefused) {
  const WithImages w;
  ASSERT_OK_AND_ASSIGN(const std::vector<std::byte> good, w.Encode());
  DirectoryHeader h;
  std::memcpy(&h, good.data(), sizeof h);
  const uint64_t at = h.images_offset;
  const uint64_t rec = at + sizeof(ImagesHeader);
  struct ImagesMutation {
    const char* what;
    int check;
    std::function<void(std::vector<std::byte>&)> apply;
    const char* message;  // after "v.dlfs: directory region: images section: "
  };
  const auto header = [](std::vector<std::byte>& b,
                         const std::function<void(DirectoryHeader&)>& f) {
    DirectoryHeader v;
    std::memcpy(&v, b.data(), sizeof v);
    f(v);
    std::memcpy(b.data(), &v, sizeof v);
  };
  const auto images = [at](std::vector<std::byte>& b, const std::function<void(ImagesHeader&)>& f) {
    ImagesHeader v;
    std::memcpy(&v, b.data() + at, sizeof v);
    f(v);
    std::memcpy(b.data() + at, &v, sizeof v);
  };
  const auto record = [rec](std::vector<std::byte>& b, uint64_t k,
                            const std::function<void(ImageRecord&)>& f) {
    ImageRecord v;
    std::memcpy(&v, b.data() + rec + k * sizeof v, sizeof v);
    f(v);
    std::memcpy(b.data() + rec + k * sizeof v, &v, sizeof v);
  };
  const std::vector<ImagesMutation> mutations = {
      {"too short", 51, [&](auto& b) { header(b, [](auto& x) { x.images_bytes = 95; }); },
       "out of place (offset 432, 95 bytes)"},
      {"unaligned", 51, [&](auto& b) { header(b, [](auto& x) { x.images_offset += 4; }); },
       "out of place (offset 436, 128 bytes)"},
      {"inside the classes", 51, [&](auto& b) { header(b, [](auto& x) { x.images_offset -= 8; }); },
       "out of place (offset 424, 128 bytes)"},
      {"into the pool", 51, [&](auto& b) { header(b, [](auto& x) { x.images_bytes += 8; }); },
       "out of place (offset 432, 136 bytes)"},
      {"past the region", 51,
       [&](auto& b) { header(b, [](auto& x) { x.images_offset = ~uint64_t{0} - 7; }); },
       "out of place (offset 18446744073709551608, 128 bytes)"},
      {"magic", 52, [&](auto& b) { images(b, [](auto& x) { x.magic ^= 1; }); }, "bad magic"},
      {"header_size", 52, [&](auto& b) { images(b, [](auto& x) { x.header_size = 80; }); },
       "unexpected header or record size"},
      {"record size", 52, [&](auto& b) { images(b, [](auto& x) { x.record_entry_size = 8; }); },
       "unexpected header or record size"},
      {"more records than images", 52,
       [&](auto& b) { images(b, [](auto& x) { x.image_count = 1; }); }, "more records than images"},
      {"records past the section", 53,
       [&](auto& b) {
         images(b, [](auto& x) {
           x.record_count = 3;
           x.image_count = 3;
         });
       },
       "records lie outside the section"},
      {"records inside the header", 53,
       [&](auto& b) { images(b, [](auto& x) { x.records_offset -= 8; }); },
       "records lie outside the section"},
      {"no filter with a cap", 54, [&](auto& b) { images(b, [](auto& x) { x.filter = 0; }); },
       "an option is out of range"},
      {"a filter without a cap", 54, [&](auto& b) { images(b, [](auto& x) { x.max_side = 0; }); },
       "an option is out of range"},
      {"filter", 54, [&](auto& b) { images(b, [](auto& x) { x.filter = 6; }); },
       "an option is out of range"},
      {"mode", 54, [&](auto& b) { images(b, [](auto& x) { x.mode = 5; }); },
       "an option is out of range"},
      {"quality", 54, [&](auto& b) { images(b, [](auto& x) { x.jpeg_quality = 101; }); },
       "an option is out of range"},
      {"color", 54, [&](auto& b) { images(b, [](auto& x) { x.color = 3; }); },
       "an option is out of range"},
      {"flags", 54, [&](auto& b) { images(b, [](auto& x) { x.flags = 2; }); },
       "an option is out of range"},
      {"probability", 54, [&](auto& b) { images(b, [](auto& x) { x.jpeg_probability = 1.5; }); },
       "an option is out of range"},
      {"probability NaN", 54,
       [&](auto& b) { images(b, [](auto& x) { x.jpeg_probability = std::nan(""); }); },
       "an option is out of range"},
      {"sample out of range", 55, [&](auto& b) { record(b, 1, [](auto& r) { r.sample = 5; }); },
       "record 1 names a sample or field out of range"},
      {"field out of range", 55, [&](auto& b) { record(b, 0, [](auto& r) { r.field = 1; }); },
       "record 0 names a sample or field out of range"},
      {"unsorted", 55, [&](auto& b) { record(b, 1, [](auto& r) { r.sample = 1; }); },
       "record 1 is not sorted by (sample, field)"},
      {"stored 0", 55, [&](auto& b) { record(b, 0, [](auto& r) { r.stored = 0; }); },
       "record 0 is malformed"},
      {"stored 4", 55, [&](auto& b) { record(b, 0, [](auto& r) { r.stored = 4; }); },
       "record 0 is malformed"},
      {"record flags", 55, [&](auto& b) { record(b, 0, [](auto& r) { r.flags = 2; }); },
       "record 0 is malformed"},
      {"width 0", 55, [&](auto& b) { record(b, 1, [](auto& r) { r.width = 0; }); },
       "record 1 is malformed"},
  };
  std::set<int> checks;
  for (const ImagesMutation& m : mutations) {
    SCOPED_TRACE(m.what);
    std::vector<std::byte> bytes = good;
    m.apply(bytes);
    const auto r = DecodeDirectory(bytes.data(), bytes.size(), WithImages::Expected(), "v.dlfs");
    ASSERT_THAT(r, StatusIs(StatusCode::kCorruption)) << "accepted";
    EXPECT_EQ(r.status().message(),
              std::string("v.dlfs: directory region: images section: ") + m.message);
    checks.insert(m.check);
  }
  for (int c = 51; c <= 55; ++c) EXPECT_TRUE(checks.count(c)) << "no mutation for check " << c;
}

}  // namespace directory_codec_test
}  // namespace dlfs::format
