// The file view of a volume (dlfs/file_view.h).
#include "dlfs/file_view.h"

#include <cstdio>
#include <cstring>

#include "format/format.h"

namespace dlfs {

namespace {
constexpr std::string_view kPpm = ".ppm";
constexpr size_t kRawHeader = 16;
}  // namespace

bool IsRawImageField(const SampleDirectory& d, uint64_t i, uint32_t f) {
  const std::optional<ImageOrigin> origin = d.FindImageOrigin(i, f);
  return origin && origin->stored == StoredImage::kRaw;
}

std::string ViewFileName(const SampleDirectory& d, uint64_t i, uint32_t f) {
  std::string name(d.name(i));
  const std::string_view field = d.field_name(f);
  if (!field.empty()) {
    name += '.';
    name += field;
  }
  if (IsRawImageField(d, i, f)) name += kPpm;
  return name;
}

uint64_t ViewFileSize(const ViewFile& file) {
  return file.info.decoded_length + (file.ppm ? kPpmHeaderBytes - kRawHeader : 0);
}

std::optional<ViewFile> ResolveViewFile(const SampleDirectory& d, std::string_view dir,
                                        std::string_view name) {
  if (name.empty() || name.find('/') != name.npos) return std::nullopt;
  auto resolve = [&](std::string_view key) {
    return d.Resolve(dir.empty() ? std::string(key) : std::string(dir) + "/" + std::string(key));
  };
  // The name as stored (a raw image's stored name reads as its PPM too).
  auto exact = [&](std::string_view base) -> std::optional<ViewFile> {
    if (d.has_fields()) {
      for (size_t dot = base.find('.'); dot != base.npos; dot = base.find('.', dot + 1)) {
        const std::string_view field = base.substr(dot + 1);
        if (field.empty()) break;  // "KEY." names nothing: the unnamed field is KEY
        const std::optional<uint32_t> id = d.FindField(field);
        if (!id) continue;
        const Result<PathEntry> key = resolve(base.substr(0, dot));
        if (!key.ok() || key->is_dir) continue;
        if (const std::optional<FieldInfo> f = d.Field(key->index, *id)) {
          return ViewFile{key->index, *f, IsRawImageField(d, key->index, f->field)};
        }
      }
    }
    const Result<PathEntry> found = resolve(base);
    if (!found.ok() || found->is_dir) return std::nullopt;
    const std::optional<uint32_t> unnamed = d.FindField("");
    if (!unnamed) return std::nullopt;
    const std::optional<FieldInfo> f = d.Field(found->index, *unnamed);
    if (!f) return std::nullopt;
    return ViewFile{found->index, *f, IsRawImageField(d, found->index, f->field)};
  };
  if (std::optional<ViewFile> file = exact(name)) return file;
  if (name.size() > kPpm.size() && name.ends_with(kPpm)) {
    std::optional<ViewFile> file = exact(name.substr(0, name.size() - kPpm.size()));
    if (file && file->ppm) return file;
  }
  return std::nullopt;
}

std::optional<ViewFile> ResolveViewPath(const SampleDirectory& d, std::string_view path) {
  while (path.starts_with('/')) path.remove_prefix(1);
  while (path.ends_with('/')) path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  if (slash == path.npos) return ResolveViewFile(d, "", path);
  return ResolveViewFile(d, path.substr(0, slash), path.substr(slash + 1));
}

Result<std::vector<std::byte>> RawImageToPpm(std::span<const std::byte> raw,
                                             const std::string& what) {
  const auto* b = reinterpret_cast<const unsigned char*>(raw.data());
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, b + at, 4);
    return v;  // little-endian, as the format (and every host dlfs builds for)
  };
  if (raw.size() < kRawHeader || std::memcmp(b, format::kRawImageMagic, 4) != 0 || b[4] != 1 ||
      (b[5] != 1 && b[5] != 3) || b[6] != 0 || b[7] != 0) {
    return Status::Corruption(what + ": not raw image bytes (docs/format.md §4.9.3)");
  }
  const uint64_t channels = b[5], height = u32(8), width = u32(12);
  if (raw.size() - kRawHeader != height * width * channels) {
    return Status::Corruption(what + ": raw image of " + std::to_string(width) + "x" +
                              std::to_string(height) + "x" + std::to_string(channels) + " has " +
                              std::to_string(raw.size() - kRawHeader) + " bytes of pixels");
  }
  // "P6", spaces to pad the header to its fixed size, "\nW H\n255\n".
  const std::string dims = "\n" + std::to_string(width) + " " + std::to_string(height) + "\n255\n";
  std::string header = channels == 3 ? "P6" : "P5";
  header.append(kPpmHeaderBytes - header.size() - dims.size(), ' ');
  header += dims;
  std::vector<std::byte> out(kPpmHeaderBytes + raw.size() - kRawHeader);
  std::memcpy(out.data(), header.data(), kPpmHeaderBytes);
  std::memcpy(out.data() + kPpmHeaderBytes, raw.data() + kRawHeader, raw.size() - kRawHeader);
  return out;
}

}  // namespace dlfs
