// The native CPU backend ("cpu"): the reference backend's host-memory device with SIMD kernels
// (runtime-dispatched per instruction set, isa.hpp) for the ops that carry a model's time, and the
// reference kernels for the rest. What it speeds up and how: docs/backend.md "Native CPU backend".
#pragma once

#include <memory>

#include "backend/backend.hpp"

namespace kiln::backend {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace kiln::backend
