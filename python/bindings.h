// The parts of the `dlfs._dlfs` extension module, one file per concept,
// registered by dlfs_module.cc:
//   bind_loader.cc        Loader and the Batch it hands out
//   bind_volume.cc        Volume: opening, reading samples, its directory
//   bind_shared_slots.cc  VolumeDataset's shared batch memory (shared_slots.h)
//   bind_writer.cc        the engine of dlfs.Writer, pack(), __version__
//   bind_decode.cc        ImagePipeline, decode_image, encode_png
//   bind_image_loader.cc  ImageLoader: the loader plus the decode stage
//   bind_distributed.cc   how the job was launched; MPI and comm= (distributed.h)
// Shared by several: status_bridge.h (Status -> exception), loader_keywords.h
// (loader keywords -> LoaderOptions), state_dict.h (state_dict() and the
// iteration's position). Every blocking call releases the GIL.
#pragma once

#include <pybind11/pybind11.h>

#include "dlfs/sample_reader.h"

namespace dlfs::python {

void RegisterLoader(pybind11::module_& m);
void RegisterVolume(pybind11::module_& m);
void RegisterSharedSlots(pybind11::module_& m);
void RegisterWriter(pybind11::module_& m);
void RegisterDecode(pybind11::module_& m);
void RegisterImageLoader(pybind11::module_& m);
void RegisterDistributed(pybind11::module_& m);
void RegisterTokens(pybind11::module_& m);

// This process's SampleReader of a Python dlfs.Volume, made on first use
// after a fork (kept in the object's __dict__). Throws as status_bridge.h.
SampleReader& ReaderOf(const pybind11::object& volume);

}  // namespace dlfs::python
