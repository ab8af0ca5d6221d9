// The CPU reference backend: plain loops, f32 accumulation, TBB-parallel over rows. It is the
// oracle of the op harness and the fallback device when no GPU exists.
#pragma once

#include "backend/backend.hpp"

#include <memory>

namespace kiln::backend {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace kiln::backend
