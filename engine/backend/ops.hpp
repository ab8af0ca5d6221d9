// The op vocabulary on the host side, below the backends and the graph builder that both use it:
// the SDK's kiln_op values (sdk/include/kiln/kiln_plugin.h, where each op's sources and result are
// listed) plus the traits every layer needs: names for messages, source counts, and which source
// an op writes in place. Shape rules: graph/infer.hpp. Semantics: docs/backend.md.
#pragma once

#include <kiln/kiln_plugin.h>

#include <cstdint>

namespace kiln {

struct OpTraits {
  const char* name;
  uint8_t min_src;
  uint8_t max_src;
  int8_t writes_src;  ///< index of a source the op updates in place, -1 for none
};

constexpr OpTraits op_traits(uint32_t op) {
  switch (op) {
    case KILN_OP_GET_ROWS:
      return {"GET_ROWS", 2, 2, -1};
    case KILN_OP_SET_ROWS:
      return {"SET_ROWS", 3, 3, 0};
    case KILN_OP_RESHAPE:
      return {"RESHAPE", 1, 1, -1};
    case KILN_OP_SLICE:
      return {"SLICE", 1, 1, -1};
    case KILN_OP_CONCAT:
      return {"CONCAT", 2, 2, -1};
    case KILN_OP_MATMUL:
      return {"MATMUL", 2, 2, -1};
    case KILN_OP_MOE_MATMUL:
      return {"MOE_MATMUL", 3, 3, -1};
    case KILN_OP_ADD:
      return {"ADD", 2, 2, -1};
    case KILN_OP_MUL:
      return {"MUL", 2, 2, -1};
    case KILN_OP_SCALE:
      return {"SCALE", 1, 1, -1};
    case KILN_OP_SILU:
      return {"SILU", 1, 1, -1};
    case KILN_OP_GELU_TANH:
      return {"GELU_TANH", 1, 1, -1};
    case KILN_OP_SIGMOID:
      return {"SIGMOID", 1, 1, -1};
    case KILN_OP_SOFTPLUS:
      return {"SOFTPLUS", 1, 1, -1};
    case KILN_OP_SOFTCAP:
      return {"SOFTCAP", 1, 1, -1};
    case KILN_OP_EXP:
      return {"EXP", 1, 1, -1};
    case KILN_OP_RMS_NORM:
      return {"RMS_NORM", 1, 3, -1};
    case KILN_OP_L2_NORM:
      return {"L2_NORM", 1, 1, -1};
    case KILN_OP_SOFTMAX:
      return {"SOFTMAX", 1, 1, -1};
    case KILN_OP_ROPE:
      return {"ROPE", 2, 2, -1};
    case KILN_OP_ATTENTION:
      return {"ATTENTION", 5, 5, -1};
    case KILN_OP_CONV1D_CAUSAL:
      return {"CONV1D_CAUSAL", 4, 4, 2};
    case KILN_OP_GATED_DELTA:
      return {"GATED_DELTA", 7, 7, 5};
    case KILN_OP_TOP_K:
      return {"TOP_K", 1, 1, -1};
    case KILN_OP_MOE_WEIGHTS:
      return {"MOE_WEIGHTS", 2, 3, -1};
    case KILN_OP_MOE_SUM:
      return {"MOE_SUM", 2, 2, -1};
    default:
      return {nullptr, 0, 0, -1};
  }
}

inline const char* op_name(uint32_t op) {
  const char* n = op_traits(op).name;
  return n ? n : "UNKNOWN_OP";
}

/** Elementwise unary ops (one f32 source, same shape out). */
constexpr bool op_is_unary(uint32_t op) {
  return op == KILN_OP_SCALE || op == KILN_OP_SILU || op == KILN_OP_GELU_TANH || op == KILN_OP_SIGMOID ||
         op == KILN_OP_SOFTPLUS || op == KILN_OP_SOFTCAP || op == KILN_OP_EXP;
}

/** Ops whose result aliases a source's memory (no kernel runs): RESHAPE, and SET_ROWS's dst. */
constexpr bool op_is_view(uint32_t op) {
  return op == KILN_OP_RESHAPE;
}

/** TOP_K's mode flag (host side; plugins leave mode 0): the result is i32 [N, 2k], each row's k ids
 *  followed by their k values as f32 bits, so one small tensor carries what a sampler needs. */
constexpr int32_t kTopKValues = 1;

/** Sequence/ragged-batch positions of the "seqs" input columns (i32 [S, 4]). */
enum SeqColumn : int { kSeqQStart = 0, kSeqQLen = 1, kSeqKvLen = 2, kSeqStateSlot = 3, kSeqColumns = 4 };

}  // namespace kiln
