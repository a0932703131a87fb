// Python bindings of the decode module (dlfs/decode.h) for one image at a
// time: ImagePipeline (decode and transform one sample, or plan and execute
// it in two steps), decode_image and encode_png. The GIL is released while
// decoding; results are new numpy arrays owning their bytes.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "dlfs/decode.h"
#include "dlfs/sample_image.h"
#include "status_bridge.h"

namespace py = pybind11;

namespace dlfs::python {
namespace {

constexpr const char* kImagePipelineDoc = R"doc(
ImagePipeline(size, crop="center", resize=0, flip=False, dtype="uint8",
              layout="NHWC", mean=None, std=None, seed=0, color="auto",
              format="auto", raw_shape=None, max_pixels=2**26,
              dct_scaling=True, scale=(0.08, 1.0), ratio=(3/4, 4/3))

Decodes and transforms one image sample in C++ (libjpeg-turbo, libspng),
with torchvision's semantics:

- crop="center": Resize(resize or size) of the shorter side, then
  CenterCrop(size); crop="random-resized": RandomResizedCrop(size, scale,
  ratio). flip: horizontal flip with p = 0.5. Antialiased bilinear
  resampling with PIL's arithmetic.
- dtype "uint8" or "float32" (ToTensor, then Normalize(mean, std) when
  given); layout "NHWC" (per image H, W, C) or "NCHW" (C, H, W).
- color: "auto" (the image's own: 1 channel for gray, 3 for colour), "rgb"
  or "gray". format: "auto" (JPEG/PNG by signature, else raw when
  raw_shape is given: (H, W[, C]), or "HxW[xC]" as --raw-shape takes
  it), "jpeg", "png" or "raw".
- Random choices are a function of (seed, epoch, index) only.
- Images over max_pixels pixels are refused from their header.

pipeline(data, epoch=0, index=0) -> numpy array (the GIL is released).
Undecodable data raises ValueError naming the problem.
)doc";

template <typename E, size_t N>
E ParseName(const EnumName<E> (&table)[N], const std::string& name, const char* what) {
  return Unwrap(ParseEnum(table, name, what));
}

// The bytes of a C-contiguous buffer (see ContiguousBytes).
std::span<const std::byte> BytesOf(const py::buffer_info& info) {
  return {static_cast<const std::byte*>(info.ptr), static_cast<size_t>(info.size * info.itemsize)};
}

py::buffer_info ContiguousBytes(const py::buffer& data) {
  py::buffer_info info = data.request();
  bool contiguous = true;
  py::ssize_t expect = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expect) contiguous = false;
    expect *= info.shape[d];
  }
  if (!contiguous) throw py::value_error("sample data must be a contiguous buffer");
  return info;
}

struct PipelineArgs {
  uint32_t size;
  std::string crop, dtype, layout, color, format;
  uint32_t resize;
  bool flip;
  std::optional<std::vector<float>> mean, std;
  uint64_t seed;
  py::object raw_shape;
  uint64_t max_pixels;
  bool dct_scaling;
  std::vector<double> scale, ratio;
};

// raw_shape=: None, (H, W[, C]), or the text --raw-shape takes ("28x28").
RawShape RawShapeArg(const py::handle& value) {
  if (value.is_none()) return {};
  if (py::isinstance<py::str>(value)) {
    Result<RawShape> parsed = ParseRawShape(value.cast<std::string>());
    if (!parsed.ok()) Check(parsed.status().WithContext("raw_shape"));
    return *parsed;
  }
  std::vector<uint32_t> r;
  try {
    r = value.cast<std::vector<uint32_t>>();
  } catch (const py::cast_error&) {
  }
  if ((r.size() != 2 && r.size() != 3) || r[0] == 0 || r[1] == 0) {
    throw py::value_error(
        "raw_shape: (height, width), (height, width, channels) or 'HxW[xC]' "
        "as --raw-shape takes it, e.g. '28x28'; got " +
        py::repr(value).cast<std::string>());
  }
  return {r[0], r[1], r.size() == 3 ? r[2] : 1};
}

ImageOptions MakeImageOptions(const PipelineArgs& a) {
  ImageOptions o;
  o.transform.size = a.size;
  o.transform.crop = ParseName(kCropModeNames, a.crop, "crop");
  o.transform.resize = a.resize;
  o.transform.flip = a.flip;
  o.transform.seed = a.seed;
  if (a.scale.size() != 2 || a.ratio.size() != 2) {
    throw py::value_error("scale and ratio are (min, max) pairs");
  }
  o.transform.random_resized.scale_min = a.scale[0];
  o.transform.random_resized.scale_max = a.scale[1];
  o.transform.random_resized.ratio_min = a.ratio[0];
  o.transform.random_resized.ratio_max = a.ratio[1];
  o.output.dtype = ParseName(kDTypeNames, a.dtype, "dtype");
  o.output.layout = ParseName(kOutputLayoutNames, a.layout, "layout");
  if (a.mean) o.output.mean = *a.mean;
  if (a.std) o.output.std = *a.std;
  o.decode.color = ParseName(kColorModeNames, a.color, "color");
  o.decode.format = ParseName(kImageFormatNames, a.format, "format");
  o.decode.raw = RawShapeArg(a.raw_shape);
  o.decode.max_pixels = a.max_pixels;
  o.decode.dct_scaling = a.dct_scaling;
  return o;
}

// The keyword arguments that rebuild `o` (for pickling and repr).
py::dict OptionsDict(const ImageOptions& o) {
  py::dict d;
  d["size"] = o.transform.size;
  d["crop"] = std::string(NameOf(kCropModeNames, o.transform.crop));
  d["resize"] = o.transform.resize;
  d["flip"] = o.transform.flip;
  d["dtype"] = std::string(NameOf(kDTypeNames, o.output.dtype));
  d["layout"] = std::string(NameOf(kOutputLayoutNames, o.output.layout));
  d["mean"] = o.output.mean.empty() ? py::object(py::none()) : py::cast(o.output.mean);
  d["std"] = o.output.std.empty() ? py::object(py::none()) : py::cast(o.output.std);
  d["seed"] = o.transform.seed;
  d["color"] = std::string(NameOf(kColorModeNames, o.decode.color));
  d["format"] = std::string(NameOf(kImageFormatNames, o.decode.format));
  d["raw_shape"] = o.decode.raw.empty()
                       ? py::object(py::none())
                       : py::object(py::make_tuple(o.decode.raw.height, o.decode.raw.width,
                                                   o.decode.raw.channels));
  d["max_pixels"] = o.decode.max_pixels;
  d["dct_scaling"] = o.decode.dct_scaling;
  const RandomResizedCropOptions& r = o.transform.random_resized;
  d["scale"] = py::make_tuple(r.scale_min, r.scale_max);
  d["ratio"] = py::make_tuple(r.ratio_min, r.ratio_max);
  return d;
}

// A new numpy array owning `bytes` (moved into a capsule).
py::array OwningArray(std::vector<std::byte> bytes, DType dtype, std::vector<int64_t> shape) {
  auto* holder = new std::vector<std::byte>(std::move(bytes));
  py::capsule base(holder, [](void* p) { delete static_cast<std::vector<std::byte>*>(p); });
  const py::dtype dt = dtype == DType::kFloat32 ? py::dtype::of<float>() : py::dtype::of<uint8_t>();
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  return py::array(dt, dims, holder->data(), base);
}

ImageWorkspace& ThreadWorkspace() {
  thread_local ImageWorkspace ws;
  return ws;
}

py::dict PlanDict(const SamplePlan& p) {
  py::dict d;
  d["format"] = std::string(NameOf(kImageFormatNames, p.format));
  d["image_size"] = py::make_tuple(p.image_width, p.image_height);
  d["box"] = py::make_tuple(p.box.top, p.box.left, p.box.height, p.box.width);
  d["resized"] = py::make_tuple(p.resized_width, p.resized_height);
  d["window"] = py::make_tuple(p.window_left, p.window_top);
  d["flip"] = p.flip;
  d["scale_denom"] = p.scale_denom;
  return d;
}

SamplePlan PlanFromDict(const py::dict& d) {
  SamplePlan p;
  p.format = ParseName(kImageFormatNames, d["format"].cast<std::string>(), "format");
  auto size = d["image_size"].cast<std::vector<uint32_t>>();
  auto box = d["box"].cast<std::vector<uint32_t>>();
  auto resized = d["resized"].cast<std::vector<uint32_t>>();
  auto window = d["window"].cast<std::vector<uint32_t>>();
  if (size.size() != 2 || box.size() != 4 || resized.size() != 2 || window.size() != 2) {
    throw py::value_error("malformed plan");
  }
  p.image_width = size[0];
  p.image_height = size[1];
  p.box = {box[0], box[1], box[2], box[3]};
  p.resized_width = resized[0];
  p.resized_height = resized[1];
  p.window_left = window[0];
  p.window_top = window[1];
  p.flip = d["flip"].cast<bool>();
  p.scale_denom = d["scale_denom"].cast<uint32_t>();
  return p;
}

py::dict InfoDict(const ImageInfo& info) {
  py::dict d;
  d["format"] = std::string(NameOf(kImageFormatNames, info.format));
  d["width"] = info.width;
  d["height"] = info.height;
  d["channels"] = info.channels;
  return d;
}

void RegisterImagePipeline(py::module_& m) {
  static const ImageOptions kImage;
  py::class_<ImagePipeline>(m, "ImagePipeline", kImagePipelineDoc)
      .def(
          py::init([](uint32_t size, const std::string& crop, uint32_t resize, bool flip,
                      const std::string& dtype, const std::string& layout,
                      std::optional<std::vector<float>> mean, std::optional<std::vector<float>> std,
                      uint64_t seed, const std::string& color, const std::string& format,
                      py::object raw_shape, uint64_t max_pixels, bool dct_scaling,
                      std::vector<double> scale, std::vector<double> ratio) {
            const PipelineArgs a{.size = size,
                                 .crop = crop,
                                 .dtype = dtype,
                                 .layout = layout,
                                 .color = color,
                                 .format = format,
                                 .resize = resize,
                                 .flip = flip,
                                 .mean = mean,
                                 .std = std,
                                 .seed = seed,
                                 .raw_shape = raw_shape,
                                 .max_pixels = max_pixels,
                                 .dct_scaling = dct_scaling,
                                 .scale = scale,
                                 .ratio = ratio};
            return Unwrap(ImagePipeline::Create(MakeImageOptions(a)));
          }),
          py::arg("size"), py::arg("crop") = "center", py::arg("resize") = 0,
          py::arg("flip") = false, py::arg("dtype") = "uint8", py::arg("layout") = "NHWC",
          py::arg("mean") = py::none(), py::arg("std") = py::none(), py::arg("seed") = 0,
          py::arg("color") = "auto", py::arg("format") = "auto", py::arg("raw_shape") = py::none(),
          py::arg("max_pixels") = kImage.decode.max_pixels,
          py::arg("dct_scaling") = kImage.decode.dct_scaling,
          py::arg("scale") = std::vector<double>{kImage.transform.random_resized.scale_min,
                                                 kImage.transform.random_resized.scale_max},
          py::arg("ratio") = std::vector<double>{kImage.transform.random_resized.ratio_min,
                                                 kImage.transform.random_resized.ratio_max})
      .def(
          "__call__",
          [](const ImagePipeline& p, py::buffer data, uint64_t epoch, uint64_t index) {
            py::buffer_info info = ContiguousBytes(data);
            std::vector<int64_t> shape;
            Result<std::vector<std::byte>> r = Status::Cancelled("not run");
            {
              py::gil_scoped_release release;
              r = p.Run(ThreadWorkspace(), BytesOf(info), epoch, index, &shape);
            }
            return OwningArray(Unwrap(std::move(r)), p.options().output.dtype, shape);
          },
          py::arg("data"), py::arg("epoch") = 0, py::arg("index") = 0,
          "Decodes and transforms one sample; its random choices are those of (epoch, index).")
      .def(
          "probe",
          [](const ImagePipeline& p, py::buffer data) {
            py::buffer_info info = ContiguousBytes(data);
            return InfoDict(Unwrap(ProbeImage(BytesOf(info), p.options().decode)));
          },
          py::arg("data"), "Format, width, height and channels from the header alone.")
      .def(
          "plan",
          [](const ImagePipeline& p, uint32_t width, uint32_t height, uint64_t epoch,
             uint64_t index, const std::string& format, uint32_t channels) {
            ImageInfo info{ParseName(kImageFormatNames, format, "format"), width, height, channels};
            return PlanDict(p.Plan(info, epoch, index));
          },
          py::arg("width"), py::arg("height"), py::arg("epoch") = 0, py::arg("index") = 0,
          py::arg("format") = "jpeg", py::arg("channels") = 3,
          "What the pipeline does to sample `index` of `epoch`, a width x height image: a dict "
          "with box (top, left, height, width), resized (w, h), window (left, top), flip, "
          "scale_denom.")
      .def(
          "execute",
          [](const ImagePipeline& p, py::buffer data, const py::dict& plan, uint32_t channels) {
            py::buffer_info info = ContiguousBytes(data);
            const SamplePlan sp = PlanFromDict(plan);
            const int64_t s = p.options().transform.size;
            std::vector<std::byte> out(p.OutputElements(channels) *
                                       DTypeSize(p.options().output.dtype));
            Status st;
            {
              py::gil_scoped_release release;
              st = p.Execute(ThreadWorkspace(), BytesOf(info), sp, channels, out.data());
            }
            Check(st);
            const bool chw = p.options().output.layout == OutputLayout::kNCHW;
            return OwningArray(
                std::move(out), p.options().output.dtype,
                chw ? std::vector<int64_t>{channels, s, s} : std::vector<int64_t>{s, s, channels});
          },
          py::arg("data"), py::arg("plan"), py::arg("channels") = 3,
          "Applies a plan (as plan() returns it, possibly edited) to one sample.")
      .def_property_readonly("size",
                             [](const ImagePipeline& p) { return p.options().transform.size; })
      .def_property_readonly(
          "options", [](const ImagePipeline& p) { return OptionsDict(p.options()); },
          "The keyword arguments that make this pipeline.")
      .def("__repr__",
           [](const ImagePipeline& p) {
             return "dlfs.ImagePipeline(**" +
                    py::repr(OptionsDict(p.options())).cast<std::string>() + ")";
           })
      .def(py::pickle([](const ImagePipeline& p) { return OptionsDict(p.options()); },
                      [](const py::dict& d) {
                        // Rebuilt through the constructor's keywords.
                        py::object cls = py::module_::import("dlfs._dlfs").attr("ImagePipeline");
                        return cls(**d).cast<ImagePipeline>();
                      }));
}

// decode_image and encode_png: whole images, no transform.
void RegisterImageCodecs(py::module_& m) {
  static const ImageOptions kImage;
  m.def(
      "decode_image",
      [](py::buffer data, const std::string& format, const std::string& color, uint32_t scale,
         const py::object& raw_shape, uint64_t max_pixels) {
        py::buffer_info info = ContiguousBytes(data);
        DecodeOptions o;
        o.format = ParseName(kImageFormatNames, format, "format");
        o.color = ParseName(kColorModeNames, color, "color");
        o.max_pixels = max_pixels;
        o.raw = RawShapeArg(raw_shape);
        Result<Image> img = Status::Cancelled("not run");
        {
          py::gil_scoped_release release;
          img = DecodeImage(ThreadWorkspace(), BytesOf(info), o, scale);
        }
        Image im = Unwrap(std::move(img));
        std::vector<std::byte> bytes(im.pixels.size());
        std::memcpy(bytes.data(), im.pixels.data(), bytes.size());
        return OwningArray(std::move(bytes), DType::kUint8, {im.height, im.width, im.channels});
      },
      py::arg("data"), py::arg("format") = "auto", py::arg("color") = "auto", py::arg("scale") = 1,
      py::arg("raw_shape") = py::none(), py::arg("max_pixels") = kImage.decode.max_pixels,
      R"doc(Decodes a whole image to a (height, width, channels) uint8 array.

scale 2, 4 or 8 decodes a JPEG at that reduced size (PIL's draft()).
color "auto", "rgb" or "gray". Raises ValueError for undecodable data.)doc");

  m.def(
      "encode_png",
      [](py::array_t<uint8_t, py::array::c_style | py::array::forcecast> a) {
        if (a.ndim() != 2 && a.ndim() != 3) throw py::value_error("expected (H, W[, C]) uint8");
        Image im;
        im.height = static_cast<uint32_t>(a.shape(0));
        im.width = static_cast<uint32_t>(a.shape(1));
        im.channels = a.ndim() == 3 ? static_cast<uint32_t>(a.shape(2)) : 1;
        im.pixels.assign(a.data(), a.data() + a.size());
        std::vector<std::byte> png = Unwrap(EncodePng(im));
        return py::bytes(reinterpret_cast<const char*>(png.data()), png.size());
      },
      py::arg("image"), "PNG file bytes of an (H, W) or (H, W, C) uint8 image (C = 1 or 3).");
}

}  // namespace

void RegisterDecode(py::module_& m) {
  RegisterImagePipeline(m);
  RegisterImageCodecs(m);
}

}  // namespace dlfs::python
