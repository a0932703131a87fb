// Direct parser of LMDB's data.mdb (liblmdb 0.9.x, 64-bit little-endian
// layout). Structure offsets follow mdb.c; see the notes in
// ../shared/research/lmdbio.md §B for the references.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <unordered_set>

#include "common/file_util.h"
#include "dlfs/io_engine.h"
#include "dlfs/lmdb.h"
#include "io/read_driver.h"

namespace dlfs {

namespace {

constexpr uint32_t kMagic = 0xBEEFC0DE;
constexpr uint32_t kDataVersion = 1;
constexpr uint32_t kPageHeader = 16;  // PAGEHDRSZ
constexpr uint32_t kNodeHeader = 8;   // NODESIZE
constexpr uint16_t kPageBranch = 0x01, kPageLeaf = 0x02, kPageOverflow = 0x04, kPageMeta = 0x08,
                   kPageLeaf2 = 0x20;
constexpr uint16_t kNodeBigData = 0x01, kNodeSubData = 0x02, kNodeDupData = 0x04;
constexpr uint32_t kMaxDepth = 32;  // CURSOR_STACK in mdb.c
// Tree pages (and overflow headers) read at once: a branch page's children
// are independent reads, and on a file system with a per-request latency
// (a parallel file system) reading them one after the other costs one
// round trip per leaf.
constexpr uint32_t kParallelReads = 32;
// Offsets inside a meta page (after the page header), x86-64.
constexpr size_t kMetaMagic = 16, kMetaVersion = 20, kMetaFreeDb = 40, kMetaMainDb = 88,
                 kMetaLastPage = 136, kMetaTxnid = 144;
// Offsets inside an MDB_db record.
constexpr size_t kDbPad = 0, kDbFlags = 4, kDbDepth = 6, kDbEntries = 32, kDbRoot = 40;

template <typename T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

class LmdbParser {
 public:
  LmdbParser(std::string path, int fd, uint64_t file_size, const LmdbMapOptions& options,
             LmdbRecordMap* out)
      : path_(std::move(path)), fd_(fd), file_size_(file_size), options_(options), out_(out) {}

  // The newest valid meta page: page size, txnid, last page, and the main
  // database's depth and entry count.
  Status ReadMeta() {
    DLFS_RETURN_IF_ERROR(PickMeta());
    LmdbStats& st = out_->stats_;
    std::memcpy(db_, meta_.data() + kMetaMainDb, sizeof db_);
    st.depth = Load<uint16_t>(db_ + kDbDepth);
    st.entries = Load<uint64_t>(db_ + kDbEntries);
    return Status::Ok();
  }

  Status Run() {
    DLFS_RETURN_IF_ERROR(ReadMeta());
    LmdbStats& st = out_->stats_;
    const uint16_t flags = Load<uint16_t>(db_ + kDbFlags);
    if (flags != 0) {
      return Status::NotSupported(path_ + ": main database has flags 0x" + Hex(flags) +
                                  " (duplicate keys or a custom key order); only plain "
                                  "key/value databases such as Caffe's are supported");
    }
    const uint64_t root = Load<uint64_t>(db_ + kDbRoot);
    if (st.depth > kMaxDepth) return Bad("main database depth " + std::to_string(st.depth));
    if (root == ~uint64_t{0}) {  // P_INVALID: an empty database
      if (st.entries != 0) return Bad("empty tree but " + std::to_string(st.entries) + " entries");
      return Status::Ok();
    }
    // The entry count is a field of the file: before it sizes anything, it
    // must fit the file. Every record is a node of at least kNodeHeader bytes
    // plus its 2-byte pointer in a leaf page, and pages 0 and 1 are the meta
    // pages, so the file can hold at most this many.
    const uint64_t per_page = (st.page_size - kPageHeader) / (kNodeHeader + 2);
    const uint64_t most = st.last_page < 2 ? 0 : (st.last_page - 1) * per_page;
    if (st.entries > most) {
      return Bad("the meta page's entry count (" + std::to_string(st.entries) +
                 ") is more than its " + std::to_string(st.last_page + 1) + " pages of " +
                 std::to_string(st.page_size) + " bytes can hold (at most " + std::to_string(most) +
                 ")");
    }
    // Still only a claim: reserve a bounded amount and let the walk grow it.
    const uint64_t reserve = std::min<uint64_t>(st.entries, uint64_t{1} << 20);
    out_->offsets_.reserve(reserve);
    out_->lengths_.reserve(reserve);
    EngineOptions eo;
    eo.kind = EngineKind::kPread;
    eo.direct_io = false;
    eo.queue_depth = kParallelReads;
    auto engine = CreateEngine({path_}, eo);
    if (!engine.ok()) return engine.status();
    engine_ = std::move(*engine);
    driver_ = std::make_unique<io_internal::ReadDriver>(*engine_);
    std::vector<std::vector<std::byte>> pages;
    DLFS_RETURN_IF_ERROR(ReadPages({root}, &pages));
    DLFS_RETURN_IF_ERROR(Walk(root, 1, pages[0]));
    if (out_->offsets_.size() != st.entries) {
      return Bad("the tree holds " + std::to_string(out_->offsets_.size()) +
                 " records, the meta page says " + std::to_string(st.entries));
    }
    return Status::Ok();
  }

 private:
  static std::string Hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(v));
    return b;
  }
  Status Bad(const std::string& what) const {
    return Status::Corruption(path_ + ": not a valid LMDB file: " + what);
  }
  Status BadPage(uint64_t pgno, const std::string& what) const {
    return Status::Corruption(path_ + ": page " + std::to_string(pgno) + ": " + what);
  }

  // Reads both meta pages and keeps the valid one with the larger txnid.
  Status PickMeta() {
    LmdbStats& st = out_->stats_;
    if (file_size_ < 2 * kPageHeader + 160) return Bad("file too small for its meta pages");
    std::vector<std::byte> first(160);
    DLFS_RETURN_IF_ERROR(PreadFull(fd_, first.data(), first.size(), 0, path_));
    if (Load<uint32_t>(first.data() + kMetaMagic) != kMagic) {
      return Bad("bad magic (is this an LMDB data.mdb?)");
    }
    // The page size lives in the free DB's md_pad of the meta page.
    const uint32_t psize = Load<uint32_t>(first.data() + kMetaFreeDb + kDbPad);
    if (psize < 512 || psize > (1u << 16) || (psize & (psize - 1)) != 0) {
      return Bad("implausible page size " + std::to_string(psize));
    }
    st.page_size = psize;
    bool found = false;
    for (uint64_t m = 0; m < 2; ++m) {
      if ((m + 1) * psize > file_size_) break;
      std::vector<std::byte> meta(160);
      DLFS_RETURN_IF_ERROR(PreadFull(fd_, meta.data(), meta.size(), m * psize, path_));
      const uint16_t pflags = Load<uint16_t>(meta.data() + 10);
      if ((pflags & kPageMeta) == 0 || Load<uint32_t>(meta.data() + kMetaMagic) != kMagic) {
        continue;
      }
      const uint32_t version = Load<uint32_t>(meta.data() + kMetaVersion);
      if (version != kDataVersion) {
        return Status::NotSupported(path_ + ": LMDB data version " + std::to_string(version) +
                                    " (supported: 1, liblmdb 0.9.x)");
      }
      const uint64_t txnid = Load<uint64_t>(meta.data() + kMetaTxnid);
      if (!found || txnid > st.txnid) {
        st.txnid = txnid;
        meta_ = meta;
        found = true;
      }
    }
    if (!found) return Bad("no valid meta page");
    st.last_page = Load<uint64_t>(meta_.data() + kMetaLastPage);
    st.file_size = file_size_;
    if (st.last_page >= file_size_ / psize) {  // not last_page + 1: it may wrap
      return Bad("truncated: the meta page names page " + std::to_string(st.last_page) +
                 " but the file has " + std::to_string(file_size_ / psize) + " pages");
    }
    return Status::Ok();
  }

  // Reads pages `pgnos` (all at once) into (*pages)[i], checking that each
  // is in range, reached only once, and names itself.
  Status ReadPages(const std::vector<uint64_t>& pgnos, std::vector<std::vector<std::byte>>* pages) {
    const uint32_t psize = out_->stats_.page_size;
    pages->assign(pgnos.size(), std::vector<std::byte>(psize));
    std::vector<ReadRequest> requests(pgnos.size());
    for (size_t i = 0; i < pgnos.size(); ++i) {
      const uint64_t pgno = pgnos[i];
      if (pgno < 2 || pgno > out_->stats_.last_page) {
        return BadPage(pgno, "page number out of range (last page " +
                                 std::to_string(out_->stats_.last_page) + ")");
      }
      if (!visited_.insert(pgno).second) return BadPage(pgno, "page reached twice (a cycle)");
      requests[i].offset = pgno * psize;
      requests[i].length = psize;
      requests[i].buffer = (*pages)[i].data();
    }
    DLFS_RETURN_IF_ERROR(ReadAll(requests));
    for (size_t i = 0; i < pgnos.size(); ++i) {
      if (Load<uint64_t>((*pages)[i].data()) != pgnos[i]) {
        return BadPage(pgnos[i], "page header names another page");
      }
    }
    return Status::Ok();
  }

  Status ReadAll(const std::vector<ReadRequest>& requests) {
    if (requests.empty()) return Status::Ok();
    std::vector<Status> results;
    DLFS_RETURN_IF_ERROR(driver_->Read(requests, &results));
    for (const Status& r : results) DLFS_RETURN_IF_ERROR(r);
    return Status::Ok();
  }

  // Depth-first, left to right: records come out in key order. `page` is
  // page `pgno`, already read; a branch page's children are read together.
  Status Walk(uint64_t pgno, uint32_t depth, const std::vector<std::byte>& page) {
    LmdbStats& st = out_->stats_;
    if (depth > st.depth) return BadPage(pgno, "tree deeper than the meta page says");
    const uint32_t psize = st.page_size;
    const uint16_t flags = Load<uint16_t>(page.data() + 10);
    const uint16_t lower = Load<uint16_t>(page.data() + 12);
    const uint16_t upper = Load<uint16_t>(page.data() + 14);
    if ((flags & kPageLeaf2) != 0) return Status::NotSupported(path_ + ": LEAF2 pages (DUPFIXED)");
    const bool leaf = (flags & kPageLeaf) != 0;
    const bool branch = (flags & kPageBranch) != 0;
    if (leaf == branch) return BadPage(pgno, "neither a branch nor a leaf page where one was due");
    if (leaf != (depth == st.depth)) return BadPage(pgno, "leaf page at the wrong depth");
    if (lower < kPageHeader || lower > upper || upper > psize || (lower - kPageHeader) % 2 != 0) {
      return BadPage(pgno, "bad free-space bounds");
    }
    const uint32_t nkeys = (lower - kPageHeader) / 2;
    if (nkeys == 0) return BadPage(pgno, "empty page in the tree");
    (leaf ? st.leaf_pages : st.branch_pages) += 1;
    std::vector<uint64_t> children;
    std::vector<std::pair<uint64_t, uint64_t>> overflow;  // (first page, value bytes) to check
    for (uint32_t k = 0; k < nkeys; ++k) {
      const uint16_t at = Load<uint16_t>(page.data() + kPageHeader + 2 * k);
      if (at < lower || at > psize - kNodeHeader) return BadPage(pgno, "node outside the page");
      const std::byte* node = page.data() + at;
      const uint32_t lo = Load<uint16_t>(node), hi = Load<uint16_t>(node + 2);
      const uint16_t nflags = Load<uint16_t>(node + 4);
      const uint16_t ksize = Load<uint16_t>(node + 6);
      if (at + kNodeHeader + ksize > psize) return BadPage(pgno, "key runs past the page");
      const std::string_view key(reinterpret_cast<const char*>(node + kNodeHeader), ksize);
      if (branch) {
        children.push_back(lo | uint64_t{hi} << 16 | uint64_t{nflags} << 32);
        continue;
      }
      if (nflags & (kNodeSubData | kNodeDupData)) {
        return Status::NotSupported(path_ + ": page " + std::to_string(pgno) +
                                    ": named sub-databases and duplicate keys are not supported");
      }
      const uint64_t dsize = lo | uint64_t{hi} << 16;
      const uint64_t data_at = uint64_t{at} + kNodeHeader + ksize;
      uint64_t offset;
      if (nflags & kNodeBigData) {
        if (data_at + 8 > psize) return BadPage(pgno, "overflow reference runs past the page");
        const uint64_t ov = Load<uint64_t>(node + kNodeHeader + ksize);
        DLFS_RETURN_IF_ERROR(CheckOverflow(ov, dsize));
        if (options_.check_overflow_headers) overflow.emplace_back(ov, dsize);
        offset = ov * psize + kPageHeader;
      } else {
        if (data_at + dsize > psize) return BadPage(pgno, "value runs past the page");
        offset = pgno * psize + data_at;
      }
      // Keys must come out strictly increasing in memcmp order, or the
      // record order we hand out would not be the database's.
      const size_t n = out_->key_offsets_.size() - 1;
      if (n > 0 && !(out_->key(n - 1) < key)) {
        return BadPage(pgno, "keys out of order at record " + std::to_string(n));
      }
      out_->keys_.append(key);
      out_->key_offsets_.push_back(out_->keys_.size());
      out_->offsets_.push_back(offset);
      out_->lengths_.push_back(dsize);
    }
    if (!overflow.empty()) DLFS_RETURN_IF_ERROR(CheckOverflowHeaders(overflow));
    // Children in groups of kParallelReads: few pages in memory at a time,
    // one round trip per group.
    for (size_t first = 0; first < children.size(); first += kParallelReads) {
      const size_t n = std::min<size_t>(kParallelReads, children.size() - first);
      const std::vector<uint64_t> group(children.begin() + first, children.begin() + first + n);
      std::vector<std::vector<std::byte>> pages;
      DLFS_RETURN_IF_ERROR(ReadPages(group, &pages));
      for (size_t i = 0; i < n; ++i) DLFS_RETURN_IF_ERROR(Walk(group[i], depth + 1, pages[i]));
    }
    return Status::Ok();
  }

  // Reads the first page header of each overflow run, all at once, and checks it.
  Status CheckOverflowHeaders(const std::vector<std::pair<uint64_t, uint64_t>>& runs) {
    const uint32_t psize = out_->stats_.page_size;
    std::vector<std::byte> headers(runs.size() * kPageHeader);
    std::vector<ReadRequest> requests(runs.size());
    for (size_t i = 0; i < runs.size(); ++i) {
      requests[i].offset = runs[i].first * psize;
      requests[i].length = kPageHeader;
      requests[i].buffer = headers.data() + i * kPageHeader;
    }
    DLFS_RETURN_IF_ERROR(ReadAll(requests));
    for (size_t i = 0; i < runs.size(); ++i) {
      DLFS_RETURN_IF_ERROR(CheckLmdbOverflowHeader({headers.data() + i * kPageHeader, kPageHeader},
                                                   runs[i].first * psize + kPageHeader,
                                                   runs[i].second, psize, path_));
    }
    return Status::Ok();
  }

  Status CheckOverflow(uint64_t pgno, uint64_t dsize) {
    LmdbStats& st = out_->stats_;
    if (pgno < 2 || pgno > st.last_page) return BadPage(pgno, "overflow page out of range");
    // OVPAGES in mdb.c: what liblmdb allocates for a value of dsize bytes.
    const uint64_t pages = (kPageHeader - 1 + dsize) / st.page_size + 1;
    if (pgno + pages - 1 > st.last_page) {
      return BadPage(pgno, "overflow run of " + std::to_string(pages) + " pages runs past page " +
                               std::to_string(st.last_page));
    }
    st.overflow_pages += pages;
    return Status::Ok();
  }

  std::string path_;
  int fd_;
  uint64_t file_size_;
  LmdbMapOptions options_;
  LmdbRecordMap* out_;
  std::vector<std::byte> meta_;
  std::byte db_[48] = {};                            // the main database's MDB_db record
  std::unique_ptr<IoEngine> engine_;                 // reads the tree pages and overflow headers
  std::unique_ptr<io_internal::ReadDriver> driver_;  // over engine_
  std::unordered_set<uint64_t> visited_;
};

Status CheckLmdbOverflowHeader(std::span<const std::byte> header, uint64_t value_offset,
                               uint64_t length, uint32_t page_size, const std::string& path) {
  const uint64_t pgno = (value_offset - kPageHeader) / page_size;
  auto bad = [&](const std::string& what) {
    return Status::Corruption(path + ": page " + std::to_string(pgno) + ": " + what);
  };
  if (header.size() < kPageHeader || value_offset < kPageHeader ||
      (value_offset - kPageHeader) % page_size != 0) {
    return bad("not the start of an overflow page");
  }
  const uint16_t flags = Load<uint16_t>(header.data() + 10);
  const uint32_t pages = Load<uint32_t>(header.data() + 12);
  if (Load<uint64_t>(header.data()) != pgno || (flags & kPageOverflow) == 0) {
    return bad("expected an overflow page");
  }
  // The value and one header must fit the run.
  if (pages == 0 || uint64_t{pages} * page_size < length + kPageHeader) {
    return bad("overflow run of " + std::to_string(pages) + " pages cannot hold a value of " +
               std::to_string(length) + " bytes");
  }
  return Status::Ok();
}

std::string LmdbDataFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return path + "/data.mdb";
  return path;
}

Result<LmdbRecordMap> LmdbRecordMap::Build(const std::string& path_in,
                                           const LmdbMapOptions& options) {
  const std::string path = LmdbDataFile(path_in);
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, path);
  DLFS_ASSIGN_OR_RETURN(const uint64_t size, FileSize(fd.get(), path));
  LmdbRecordMap map;
  map.path_ = path;
  LmdbParser parser(path, fd.get(), size, options, &map);
  DLFS_RETURN_IF_ERROR(parser.Run());
  return map;
}

Result<LmdbStats> ReadLmdbMeta(const std::string& path_in) {
  const std::string path = LmdbDataFile(path_in);
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, path);
  DLFS_ASSIGN_OR_RETURN(const uint64_t size, FileSize(fd.get(), path));
  LmdbRecordMap map;
  LmdbParser parser(path, fd.get(), size, LmdbMapOptions{}, &map);
  DLFS_RETURN_IF_ERROR(parser.ReadMeta());
  return map.stats();
}

}  // namespace dlfs
