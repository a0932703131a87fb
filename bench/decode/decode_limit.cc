// The decode library's own rate: the limit dlfs' decode stage is measured
// against (docs/benchmarks.md, "Decode and augment").
//
//   dlfs_decode_limit DIR_OR_FILE... [--threads N] [--reps R]
//                     [--pipeline SIZE [--crop center|random-resized] [--flip]
//                      [--float] [--no-dct-scaling]]
//
// Every regular file under the arguments is read into memory first (not
// timed). Then, R times, N threads decode every image once from memory (each
// thread a strided share):
// - default ("library"): TurboJPEG's tjDecompress2 to full-scale RGB (or gray
//   for gray JPEGs) with default flags — what tjbench measures — and, for PNG
//   files, libspng's spng_decode_image to 8-bit (RGB8, or G8 for gray) — the
//   decode loop a caller of the libraries would write;
// - --pipeline SIZE: dlfs' ImagePipeline (decode + crop/resize + output), as
//   the decode stage runs it per sample, without I/O or batching.
// Output: one JSON object per repetition {mode, threads, images, seconds,
// images_per_s, cpu_seconds, cpu_s_per_1000}; CPU is user+sys of the whole
// process (getrusage) over the timed part.
#include <spng.h>
#include <turbojpeg.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "dlfs/decode.h"

namespace {

std::vector<std::vector<unsigned char>> LoadAll(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  for (const std::string& a : args) {
    if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(a)) {
        if (e.is_regular_file()) paths.push_back(e.path().string());
      }
    } else {
      paths.push_back(a);
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<std::vector<unsigned char>> out;
  out.reserve(paths.size());
  for (const std::string& p : paths) {
    std::ifstream in(p, std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

// Decodes one image with the library itself into `buf`; false on failure.
bool LibraryDecode(tjhandle tj, const std::vector<unsigned char>& d,
                   std::vector<unsigned char>& buf) {
  if (d.size() >= 3 && d[0] == 0xff && d[1] == 0xd8) {
    int w = 0, h = 0, ss = 0, cs = 0;
    if (tjDecompressHeader3(tj, d.data(), d.size(), &w, &h, &ss, &cs) != 0) return false;
    const int pf = cs == TJCS_GRAY ? TJPF_GRAY : TJPF_RGB;
    buf.resize(size_t(w) * h * tjPixelSize[pf]);
    return tjDecompress2(tj, d.data(), d.size(), buf.data(), w, 0, h, pf, 0) == 0;
  }
  spng_ctx* ctx = spng_ctx_new(0);
  spng_ihdr ihdr{};
  size_t len = 0;
  bool ok = spng_set_png_buffer(ctx, d.data(), d.size()) == 0 && spng_get_ihdr(ctx, &ihdr) == 0;
  const int fmt = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth <= 8
                      ? SPNG_FMT_G8
                      : SPNG_FMT_RGB8;
  ok = ok && spng_decoded_image_size(ctx, fmt, &len) == 0;
  if (ok) {
    buf.resize(len);
    ok = spng_decode_image(ctx, buf.data(), len, fmt, 0) == 0;
  }
  spng_ctx_free(ctx);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decode rate of TurboJPEG/libspng themselves, or of dlfs' ImagePipeline"};
  std::vector<std::string> inputs;
  uint32_t threads = 1, reps = 3, size = 0;
  std::string crop = "random-resized";
  bool flip = false, as_float = false, no_dct = false;
  app.add_option("inputs", inputs, "Image files or directories")->required();
  app.add_option("--threads", threads, "Decoding threads")->capture_default_str();
  app.add_option("--reps", reps, "Repetitions")->capture_default_str();
  app.add_option("--pipeline", size, "Run dlfs' ImagePipeline with this output size instead");
  app.add_option("--crop", crop, "--pipeline: center or random-resized")->capture_default_str();
  app.add_flag("--flip", flip, "--pipeline: random horizontal flips");
  app.add_flag("--float", as_float, "--pipeline: float32 NCHW, ImageNet mean/std");
  app.add_flag("--no-dct-scaling", no_dct, "--pipeline: full-scale JPEG decoding only");
  CLI11_PARSE(app, argc, argv);

  const auto images = LoadAll(inputs);
  if (images.empty()) {
    std::fprintf(stderr, "dlfs_decode_limit: no files\n");
    return 2;
  }
  std::unique_ptr<dlfs::ImagePipeline> pipeline;
  if (size > 0) {
    dlfs::ImageOptions o;
    o.transform.size = size;
    auto c = dlfs::ParseEnum(dlfs::kCropModeNames, crop, "crop");
    if (!c.ok()) {
      std::fprintf(stderr, "dlfs_decode_limit: %s\n", c.status().message().c_str());
      return 2;
    }
    o.transform.crop = *c;
    o.transform.flip = flip;
    o.decode.dct_scaling = !no_dct;
    o.decode.color = dlfs::ColorMode::kAuto;
    if (as_float) {
      o.output = {dlfs::DType::kFloat32,
                  dlfs::OutputLayout::kNCHW,
                  {0.485f, 0.456f, 0.406f},
                  {0.229f, 0.224f, 0.225f}};
    }
    auto p = dlfs::ImagePipeline::Create(o);
    if (!p.ok()) {
      std::fprintf(stderr, "dlfs_decode_limit: %s\n", p.status().message().c_str());
      return 2;
    }
    pipeline = std::make_unique<dlfs::ImagePipeline>(std::move(*p));
  }
  for (uint32_t rep = 0; rep < reps; ++rep) {
    std::atomic<uint64_t> failures{0};
    const double cpu0 = dlfs::CpuSeconds(), t0 = dlfs::Now();
    std::vector<std::thread> pool;
    for (uint32_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        tjhandle tj = tjInitDecompress();
        dlfs::ImageWorkspace ws;
        std::vector<unsigned char> buf;
        std::vector<std::byte> out;  // reused, as the decode stage's pooled batch buffers
        for (size_t i = t; i < images.size(); i += threads) {
          bool ok;
          if (pipeline) {
            // Per sample, what the decode stage does: probe, plan, execute.
            const auto data = std::as_bytes(std::span(images[i]));
            auto info = dlfs::ProbeImage(data, pipeline->options().decode);
            ok = info.ok();
            if (ok) {
              const uint32_t c = pipeline->OutputChannels(*info);
              out.resize(pipeline->OutputElements(c) *
                         dlfs::DTypeSize(pipeline->options().output.dtype));
              ok = pipeline->Execute(ws, data, pipeline->Plan(*info, 0, i), c, out.data()).ok();
            }
          } else {
            ok = LibraryDecode(tj, images[i], buf);
          }
          if (!ok) failures.fetch_add(1);
        }
        tjDestroy(tj);
      });
    }
    for (std::thread& t : pool) t.join();
    const double secs = dlfs::Now() - t0, cpu = dlfs::CpuSeconds() - cpu0;
    std::printf(
        "{\"mode\": \"%s\", \"threads\": %u, \"images\": %zu, \"failures\": %llu, "
        "\"seconds\": %.4f, \"images_per_s\": %.1f, \"cpu_seconds\": %.4f, "
        "\"cpu_s_per_1000\": %.4f}\n",
        pipeline ? "pipeline" : "library", threads, images.size(),
        static_cast<unsigned long long>(failures.load()), secs, images.size() / secs, cpu,
        cpu / images.size() * 1000);
    std::fflush(stdout);
  }
  return 0;
}
