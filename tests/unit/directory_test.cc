#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "dlfs/builder.h"
#include "dlfs/volume.h"
#include "testutil.h"

namespace dlfs {
namespace directory_test {

using testing::Bytes;
using testing::TempDir;

struct Item {
  std::string path;
  std::string data;
  uint32_t label;
};

std::shared_ptr<Volume> Build(const TempDir& tmp, const std::vector<Item>& items,
                              std::vector<std::string> classes = {},
                              VolumeBuilder::Options opt = {.layout = DirectoryLayout::kTree}) {
  auto b = VolumeBuilder::Create(tmp / "v.dlfs", opt);
  EXPECT_OK(b);
  if (!b.ok()) return nullptr;
  (*b)->SetClassNames(std::move(classes));
  for (const Item& it : items) {
    const Status st = (*b)->Add(it.path, Bytes(it.data), it.label);
    EXPECT_OK(st);
  }
  const Status st = (*b)->Finish();
  EXPECT_OK(st);
  auto v = Volume::Open(tmp / "v.dlfs");
  EXPECT_OK(v);
  return v.ok() ? *v : nullptr;
}

TEST(DirectoryTest, IndexPathAndListing) {
  TempDir tmp;
  // Insertion order is deliberately not the canonical order.
  auto v = Build(tmp,
                 {{"dog/b.jpg", "dog-b", 1},
                  {"cat/a.jpg", "cat-a", 0},
                  {"README", "hello", kNoLabel},
                  {"dog/a.jpg", "dog-a", 1},
                  {"cat/deep/x.jpg", "cat-x", 0}},
                 {"cat", "dog"});
  ASSERT_NE(v, nullptr);
  const SampleDirectory& d = v->directory();
  ASSERT_EQ(d.size(), 5u);
  ASSERT_EQ(d.dir_count(), 4u);  // root, cat, dog, cat/deep
  ASSERT_EQ(d.class_count(), 2u);
  EXPECT_EQ(d.class_name(0), "cat");
  EXPECT_EQ(d.class_name(1), "dog");

  // Canonical order: root's samples, then cat's, then dog's, then cat/deep's.
  const std::vector<std::string> expected = {"README", "cat/a.jpg", "dog/a.jpg", "dog/b.jpg",
                                             "cat/deep/x.jpg"};
  for (uint64_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(d.Path(i), expected[i]);
    auto found = d.Lookup(expected[i]);
    ASSERT_OK(found);
    EXPECT_EQ(*found, i);
  }
  EXPECT_EQ(d.label(0), kNoLabel);
  EXPECT_EQ(d.label(1), 0u);
  EXPECT_EQ(d.label(3), 1u);
  EXPECT_EQ(d.name(4), "x.jpg");

  auto bytes = v->Read(*d.Lookup("dog/b.jpg"));
  ASSERT_OK(bytes);
  EXPECT_EQ(*bytes, Bytes("dog-b"));

  auto cat = d.Resolve("cat/");
  ASSERT_OK(cat);
  EXPECT_TRUE(cat->is_dir);
  EXPECT_EQ(d.DirPath(cat->index), "cat");
  const DirInfo ci = d.dir(cat->index);
  EXPECT_EQ(ci.sample_count, 1u);
  EXPECT_EQ(ci.child_count, 1u);
  ASSERT_EQ(d.ChildDirs(cat->index).size(), 1u);
  EXPECT_EQ(d.DirPath(d.ChildDirs(cat->index)[0]), "cat/deep");
  EXPECT_OK(d.Resolve("//cat//deep/x.jpg"));

  auto root = d.Resolve("");
  ASSERT_OK(root);
  EXPECT_TRUE(root->is_dir);
  EXPECT_EQ(root->index, 0u);

  EXPECT_EQ(d.Lookup("cat").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d.Lookup("cat/b.jpg").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(d.Lookup("README/x").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(d.Lookup("dog/a.jpg/").status().code(), StatusCode::kOk);
  EXPECT_EQ(v->Read(99).status().code(), StatusCode::kInvalidArgument);
}

TEST(DirectoryTest, EmptyVolumeOpens) {
  TempDir tmp;
  auto v = Build(tmp, {});
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->size(), 0u);
  EXPECT_EQ(v->directory().dir_count(), 1u);
  EXPECT_EQ(v->directory().Lookup("x").status().code(), StatusCode::kNotFound);
}

TEST(DirectoryTest, AlignmentPlacesEverySampleOnTheBoundary) {
  TempDir tmp;
  auto v = Build(tmp, {{"a", "1", 0}, {"b", std::string(5000, 'b'), 0}, {"c", "333", 0}}, {},
                 {.align = 4096});
  ASSERT_NE(v, nullptr);
  for (uint64_t i = 0; i < v->size(); ++i) {
    EXPECT_EQ(v->directory().sample(i).offset % 4096, 0u);
    EXPECT_OK(v->Read(i));
  }
  EXPECT_EQ(v->info().data_alignment, 4096u);
}

// A random tree checked against a std::map model: every path resolves to the
// sample holding its bytes, and listings are complete and sorted.
TEST(DirectoryTest, RandomTreeMatchesModel) {
  TempDir tmp;
  std::mt19937 rng(42);
  const std::vector<std::string> parts = {
      "a", "b", "Z", "ab", "\xc3\xa9t\xc3\xa9", "0", "x_y", "long-name-" + std::string(100, 'q')};
  std::map<std::string, Item> model;
  std::set<std::string> dirs;
  while (model.size() < 1500) {
    std::string path;
    const int depth = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < depth - 1; ++k) path += "d" + parts[rng() % parts.size()] + "/";
    path += parts[rng() % parts.size()] + std::to_string(rng() % 500);
    if (dirs.count(path)) continue;
    bool clash = false;  // a prefix of this path that is already a sample
    for (size_t p = path.find('/'); p != std::string::npos; p = path.find('/', p + 1)) {
      if (model.count(path.substr(0, p))) clash = true;
    }
    if (clash || model.count(path)) continue;
    for (size_t p = path.find('/'); p != std::string::npos; p = path.find('/', p + 1)) {
      dirs.insert(path.substr(0, p));
    }
    model[path] = Item{path, "bytes of " + path, static_cast<uint32_t>(rng() % 7)};
  }
  std::vector<Item> items;
  for (auto& [p, it] : model) items.push_back(it);
  std::shuffle(items.begin(), items.end(), rng);
  auto v = Build(tmp, items);
  ASSERT_NE(v, nullptr);
  const SampleDirectory& d = v->directory();
  ASSERT_EQ(d.size(), model.size());
  EXPECT_EQ(d.dir_count(), dirs.size() + 1);
  for (const auto& [path, it] : model) {
    auto idx = d.Lookup(path);
    ASSERT_OK(idx) << path;
    EXPECT_EQ(d.Path(*idx), path);
    EXPECT_EQ(d.label(*idx), it.label);
    auto bytes = v->Read(*idx);
    ASSERT_OK(bytes);
    EXPECT_EQ(*bytes, Bytes(it.data));
  }
  for (const std::string& dir : dirs) {
    auto e = d.Resolve(dir);
    ASSERT_TRUE(e.ok() && e->is_dir) << dir;
    const DirInfo info = d.dir(e->index);
    size_t direct = 0;
    for (const auto& [path, it] : model) {
      if (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
          path[dir.size()] == '/' && path.find('/', dir.size() + 1) == std::string::npos) {
        ++direct;
      }
    }
    EXPECT_EQ(info.sample_count, direct) << dir;
  }
}

}  // namespace directory_test
}  // namespace dlfs
