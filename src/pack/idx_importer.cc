// IDX importer: MNIST-style "<split>-images-idx3-ubyte" / "-labels-idx1-ubyte"
// pairs, gzipped or not (zlib reads both).
#include <dirent.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <optional>
#include <vector>

#include "pack/importer.h"

namespace dlfs::pack_internal {

namespace {

constexpr uint32_t kMaxImageBytes = 1u << 30;

struct Split {
  std::string images;
  std::string labels;
};

// "train-images-idx3-ubyte.gz" -> {"train", images}; also accepts the
// "train-images.idx3-ubyte" spelling some mirrors use.
bool ParseName(const std::string& name, std::string* split, bool* is_images) {
  for (const char* kind : {"images", "labels"}) {
    for (const char* sep : {"-", "."}) {
      const std::string mid =
          std::string("-") + kind + sep + (kind[0] == 'i' ? "idx3" : "idx1") + "-ubyte";
      const size_t pos = name.find(mid);
      if (pos == std::string::npos || pos == 0) continue;
      const std::string rest = name.substr(pos + mid.size());
      if (!rest.empty() && rest != ".gz") continue;
      *split = name.substr(0, pos);
      *is_images = kind[0] == 'i';
      return true;
    }
  }
  return false;
}

class GzFile {
 public:
  GzFile(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (f_ != nullptr) gzclose(f_);
  }
  Status status() const {
    return f_ != nullptr ? Status::Ok() : Status::FromErrno(errno ? errno : EIO, path_);
  }
  // The file's size when it is not compressed (known once something was
  // read), else nullopt: a gzip stream's length is only known at its end.
  std::optional<uint64_t> PlainSize() const {
    struct stat st;
    if (gzdirect(f_) != 1 || ::stat(path_.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return std::nullopt;
    }
    return static_cast<uint64_t>(st.st_size);
  }
  // Reads exactly n bytes; a short read is a truncation error naming `what`.
  Status ReadExact(void* buf, size_t n, const std::string& what) {
    char* p = static_cast<char*>(buf);
    while (n > 0) {
      const unsigned want = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
      const int r = gzread(f_, p, want);
      if (r < 0) {
        int errnum = 0;
        const char* msg = gzerror(f_, &errnum);
        return Status::Corruption(path_ + ": " + (errnum == Z_ERRNO ? "read error" : msg));
      }
      if (r == 0) return Status::Corruption(path_ + ": truncated while reading " + what);
      p += r;
      n -= static_cast<size_t>(r);
    }
    return Status::Ok();
  }

 private:
  std::string path_;
  gzFile f_;
};

uint32_t BigEndian32(const unsigned char* b) {
  return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
}

// Reads an IDX header: magic (0, 0, type 0x08 = unsigned byte, ndims) and
// the big-endian dimensions.
Result<std::vector<uint32_t>> ReadHeader(GzFile& f, const std::string& path, int want_dims) {
  unsigned char magic[4];
  DLFS_RETURN_IF_ERROR(f.ReadExact(magic, 4, "the header"));
  if (magic[0] != 0 || magic[1] != 0)
    return Status::Corruption(path + ": not an IDX file (bad magic)");
  if (magic[2] != 0x08) {
    return Status::NotSupported(path + ": IDX element type 0x" + std::to_string(magic[2]) +
                                " (only unsigned bytes, 0x08, are supported)");
  }
  if (magic[3] != want_dims) {
    return Status::Corruption(path + ": expected " + std::to_string(want_dims) +
                              " dimensions, header says " + std::to_string(magic[3]));
  }
  std::vector<uint32_t> dims(want_dims);
  for (int i = 0; i < want_dims; ++i) {
    unsigned char b[4];
    DLFS_RETURN_IF_ERROR(f.ReadExact(b, 4, "the header"));
    dims[i] = BigEndian32(b);
  }
  return dims;
}

Status ImportSplit(const std::string& dir, const std::string& split, const Split& files,
                   PackContext& ctx) {
  const std::string images_path = dir + "/" + files.images;
  const std::string labels_path = dir + "/" + files.labels;
  GzFile images(images_path), labels(labels_path);
  if (Status st = images.status(); !st.ok()) return ctx.Unreadable(images_path, st);
  if (Status st = labels.status(); !st.ok()) return ctx.Unreadable(labels_path, st);
  DLFS_ASSIGN_OR_RETURN(std::vector<uint32_t> idims, ReadHeader(images, images_path, 3));
  DLFS_ASSIGN_OR_RETURN(std::vector<uint32_t> ldims, ReadHeader(labels, labels_path, 1));
  const uint32_t count = idims[0];
  if (ldims[0] != count) {
    return Status::Corruption(labels_path + ": has " + std::to_string(ldims[0]) + " labels but " +
                              images_path + " has " + std::to_string(count) + " images");
  }
  const uint64_t image_bytes = uint64_t{idims[1]} * idims[2];
  if (image_bytes == 0 || image_bytes > kMaxImageBytes) {
    return Status::Corruption(images_path + ": implausible image size " + std::to_string(idims[1]) +
                              "x" + std::to_string(idims[2]));
  }
  // Header counts are claims: an uncompressed file must hold what its
  // header promises before anything is sized by it (a gzip stream is only
  // read as far as its data goes; nothing is allocated by its header).
  auto check_size = [](GzFile& f, const std::string& path, uint64_t header, uint64_t count,
                       uint64_t each, const char* what) -> Status {
    const std::optional<uint64_t> size = f.PlainSize();
    const uint64_t need = header + count * each;
    if (size && *size < need) {
      return Status::Corruption(path + ": truncated: its header says " + std::to_string(count) +
                                " " + what + " (" + std::to_string(need) +
                                " bytes with the header), the file has " + std::to_string(*size) +
                                " bytes");
    }
    return Status::Ok();
  };
  const std::string shape = std::to_string(idims[1]) + "x" + std::to_string(idims[2]);
  DLFS_RETURN_IF_ERROR(
      check_size(images, images_path, 16, count, image_bytes, ("images of " + shape).c_str()));
  DLFS_RETURN_IF_ERROR(check_size(labels, labels_path, 8, count, 1, "labels"));
  const std::string name = split == "t10k" ? "test" : split;
  const int width =
      std::max<int>(5, static_cast<int>(std::to_string(count ? count - 1 : 0).size()));
  std::vector<std::byte> chunk(std::min<uint64_t>(image_bytes, kCopyChunk));
  std::vector<unsigned char> label_buf;
  std::string path;
  for (uint32_t i = 0; i < count; ++i) {
    if (label_buf.empty()) {  // labels are tiny: read them in blocks
      label_buf.resize(std::min<uint32_t>(count - i, 65536));
      DLFS_RETURN_IF_ERROR(
          labels.ReadExact(label_buf.data(), label_buf.size(), "label " + std::to_string(i)));
      std::reverse(label_buf.begin(), label_buf.end());
    }
    const uint32_t label = label_buf.back();
    label_buf.pop_back();
    std::string index = std::to_string(i);
    path = name + "/" + std::string(width - std::min<int>(width, index.size()), '0') + index;
    VolumeBuilder& b = ctx.builder();
    DLFS_RETURN_IF_ERROR(b.BeginSample(path, label));
    for (uint64_t left = image_bytes; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
      Status st = images.ReadExact(chunk.data(), n, "image " + index);
      if (st.ok()) st = b.Append({chunk.data(), n});
      if (!st.ok()) {
        b.AbortSample();
        return st;
      }
      left -= n;
    }
    DLFS_RETURN_IF_ERROR(b.EndSample());
    DLFS_RETURN_IF_ERROR(ctx.Tick());
  }
  return Status::Ok();
}

}  // namespace

Status ImportIdx(const std::string& dir, PackContext& ctx) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::FromErrno(errno, dir);
  std::map<std::string, Split> splits;  // sorted: "t10k" before "train"
  while (dirent* e = ::readdir(d)) {
    std::string split;
    bool is_images = false;
    if (!ParseName(e->d_name, &split, &is_images)) continue;
    std::string& slot = is_images ? splits[split].images : splits[split].labels;
    if (!slot.empty()) {
      ::closedir(d);
      return Status::InvalidArgument(dir + ": both " + slot + " and " + e->d_name + " are split '" +
                                     split + "' (keep one)");
    }
    slot = e->d_name;
  }
  ::closedir(d);
  if (splits.empty()) {
    return Status::InvalidArgument(dir + ": no IDX files (*-images-idx3-ubyte[.gz])");
  }
  for (const auto& [split, files] : splits) {
    if (files.images.empty() || files.labels.empty()) {
      return Status::InvalidArgument(
          dir + ": split '" + split + "' has " +
          (files.images.empty() ? "labels but no images" : "images but no labels"));
    }
  }
  if (ctx.wants_progress()) {  // the total from the headers (errors come later)
    uint64_t total = 0;
    for (const auto& [split, files] : splits) {
      GzFile images(dir + "/" + files.images);
      auto dims = images.status().ok() ? ReadHeader(images, files.images, 3)
                                       : Result<std::vector<uint32_t>>(images.status());
      if (dims.ok()) total += (*dims)[0];
    }
    ctx.set_total_samples(total);
  }
  for (const auto& [split, files] : splits) {
    DLFS_RETURN_IF_ERROR(ImportSplit(dir, split, files, ctx));
  }
  return Status::Ok();
}

}  // namespace dlfs::pack_internal
