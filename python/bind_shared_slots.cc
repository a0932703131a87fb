// Python binding of the shared batch memory of VolumeDataset and
// LoaderDataset (shared_slots.h): _SharedSlots in a DataLoader worker,
// _attach_slot and its _SlotLease (a writable buffer) in the main process.
// Used by python/dlfs/torch.py only.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "dlfs/batch.h"
#include "dlfs/sample_reader.h"
#include "shared_slots.h"
#include "status_bridge.h"

namespace py = pybind11;

namespace dlfs::python {

namespace {
// Slot numbers come from Python: one out of range would address memory
// outside the mapping.
void CheckSlot(const SharedSlots& s, uint32_t slot) {
  if (slot >= s.slots()) {
    throw py::index_error("slot " + std::to_string(slot) + " out of range (" +
                          std::to_string(s.slots()) + " slots)");
  }
}
}  // namespace

void RegisterSharedSlots(py::module_& m) {
  py::class_<SharedSlots>(
      m, "_SharedSlots", "Shared batch memory of a DataLoader worker (VolumeDataset batched mode).")
      .def(py::init([](uint32_t slots, uint64_t slot_bytes) {
             return Unwrap(SharedSlots::Create(slots, slot_bytes));
           }),
           py::arg("slots"), py::arg("slot_bytes"))
      .def_property_readonly("fd", &SharedSlots::fd)
      .def_property_readonly("total", &SharedSlots::total)
      .def_property_readonly("slot_bytes", &SharedSlots::slot_bytes)
      .def(
          "acquire",
          [](SharedSlots& s, double timeout) {
            py::gil_scoped_release release;
            return s.Acquire(timeout);
          },
          py::arg("timeout"))
      .def(
          "release",
          [](SharedSlots& s, uint32_t slot) {
            CheckSlot(s, slot);
            s.Release(slot);
          },
          py::arg("slot"))
      .def(
          "read",
          [](SharedSlots& s, py::object volume, uint32_t slot, std::vector<uint64_t> indices,
             bool verify) -> py::object {
            CheckSlot(s, slot);
            SampleReader& reader = ReaderOf(volume);
            Result<Batch> r = Status::Cancelled("not run");
            {
              py::gil_scoped_release release;
              auto need = reader.BufferBytes(indices);
              if (need.ok() && *need > s.slot_bytes()) return py::none();  // does not fit
              r = need.ok() ? reader.ReadInto(indices, s.Slot(slot), verify) : need.status();
            }
            const Batch b = Unwrap(std::move(r));
            py::list offsets, lengths;
            for (size_t i = 0; i < b.size(); ++i) {
              offsets.append(b.sample(i).data() - s.Slot(slot).data());
              lengths.append(b.sample(i).size());
            }
            return py::make_tuple(offsets, lengths);
          },
          py::arg("volume"), py::arg("slot"), py::arg("indices"), py::arg("verify") = true,
          "Reads the samples into slot `slot`: (offsets, lengths), or None when they do not fit.")
      .def(
          "put",
          [](SharedSlots& s, uint32_t slot, const Batch& batch) -> py::object {
            CheckSlot(s, slot);
            const size_t n = batch.size();
            uint64_t bytes = 0;
            for (size_t i = 0; i < n; ++i) bytes += batch.sample(i).size();
            if (bytes > s.slot_bytes()) return py::none();  // does not fit
            py::array_t<int64_t> lengths(static_cast<py::ssize_t>(n));
            int64_t* len = lengths.mutable_data();
            std::byte* dst = s.Slot(slot).data();
            {
              // The batch's buffer stays alive (the caller holds it); the
              // slot is this worker's until the main process's lease ends.
              py::gil_scoped_release release;
              for (size_t i = 0; i < n; ++i) {
                const std::span<const std::byte> sample = batch.sample(i);
                if (!sample.empty()) std::memcpy(dst, sample.data(), sample.size());
                dst += sample.size();
                len[i] = static_cast<int64_t>(sample.size());
              }
            }
            return lengths;
          },
          py::arg("slot"), py::arg("batch"),
          "Copies a Loader batch's samples back to back into slot `slot`: their lengths (an "
          "int64 array; the samples follow one another from the slot's start), or None when "
          "they do not fit.");

  py::class_<SlotLease, std::shared_ptr<SlotLease>>(m, "_SlotLease", py::buffer_protocol())
      .def_buffer([](SlotLease& l) {
        // Writable, like the copies DataLoader makes of samples sent the
        // ordinary way: the batch is the caller's to use as it likes.
        return py::buffer_info(l.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(l.slot_bytes())}, {1},
                               /*readonly=*/false);
      });
  m.def(
      "_attach_slot",
      [](int pid, int fd, uint64_t total, uint64_t slot_bytes, uint32_t slot) {
        return Unwrap(AttachSlot(pid, fd, total, slot_bytes, slot));
      },
      py::arg("pid"), py::arg("fd"), py::arg("total"), py::arg("slot_bytes"), py::arg("slot"),
      "Maps slot `slot` of DataLoader worker `pid`'s shared batch memory.");
}

}  // namespace dlfs::python
