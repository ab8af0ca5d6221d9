// The CPU kernels, one function per op family (files named after the family). Each takes a bound
// node whose buffers are CPU buffers; shapes were checked by the graph builder, and each kernel
// re-checks what it indexes with so a malformed graph is an error, not a crash.
#pragma once

#include "backend/backend.hpp"

namespace kiln::backend::reference {

void run_get_rows(const Node& n);  // copy.cpp
void run_set_rows(const Node& n);
void run_slice(const Node& n);
void run_concat(const Node& n);
void run_matmul(const Node& n);  // matmul.cpp
void run_moe_matmul(const Node& n);
void run_binary(const Node& n);    // elementwise.cpp: ADD, MUL
void run_unary(const Node& n);     // SCALE, SILU, GELU_TANH, SIGMOID, SOFTPLUS, SOFTCAP, EXP
void run_rms_norm(const Node& n);  // norm.cpp
void run_l2_norm(const Node& n);
void run_softmax(const Node& n);
void run_rope(const Node& n);         // rope.cpp
void run_attention(const Node& n);    // attention.cpp
void run_conv1d(const Node& n);       // conv.cpp
void run_gated_delta(const Node& n);  // delta_net.cpp
void run_top_k(const Node& n);        // moe.cpp
void run_moe_weights(const Node& n);
void run_moe_sum(const Node& n);

}  // namespace kiln::backend::reference
