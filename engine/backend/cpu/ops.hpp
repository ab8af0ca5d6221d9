// The native CPU backend's ops: one function per op family it implements itself (files named after
// the family); run_node sends every other op to the reference kernels.
#pragma once

#include "backend/backend.hpp"
#include "backend/cpu/kernels.hpp"

namespace kiln::backend::simd {

/** The kernel table of active_isa(), chosen once per process. */
const Kernels& kernels();

void run_matmul(const Node& n);  // matmul.cpp
void run_moe_matmul(const Node& n);
void run_attention(const Node& n);    // attention.cpp
void run_gated_delta(const Node& n);  // delta_net.cpp
void run_conv1d(const Node& n);       // conv.cpp
void run_node(const Node& n);         // cpu_backend.cpp

}  // namespace kiln::backend::simd
