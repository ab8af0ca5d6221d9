// The host-memory device both CPU backends share (buffers in host memory, weights imported from
// the mapped file in place, one worker thread running graphs in order, TBB loops for the kernels)
// and the CPU reference backend built on it: plain loops, f32 accumulation, TBB-parallel over rows.
// The reference is the oracle of the op harness; the fast CPU backend (engine/backend/cpu) serves.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace kiln::backend {

/** What distinguishes one host-memory device from another: its names and its op dispatch. */
struct HostDeviceSpec {
  std::string backend;                 ///< backend name and the registry spec that picks it: "reference", "cpu"
  std::string id;                      ///< device id
  std::string name;                    ///< device name for logs
  std::string driver;                  ///< free text: which kernels
  void (*run)(const Node&) = nullptr;  ///< runs one node (checked by prepare()); throws BackendError
};

std::unique_ptr<Backend> make_host_backend(const HostDeviceSpec& spec);

/** The CPU reference backend: backend and device "reference". */
std::unique_ptr<Backend> make_reference_backend();

namespace reference {
/** Runs one node with the reference kernels (the fast backend's fallback for ops it leaves). */
void run_node(const Node& n);
}  // namespace reference

}  // namespace kiln::backend
