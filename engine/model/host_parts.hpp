// The model host's own parts, shared by model_host.cpp (loading, caches, sequences) and
// host_step.cpp (graphs per shape, steps in flight). Not included anywhere else.
#pragma once

#include <kiln/kiln_plugin.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/allocator.hpp"
#include "graph/graph.hpp"
#include "model/model_host.hpp"

namespace kiln::model {

using backend::TensorDesc;
using backend::TensorRef;

struct ModelHost::Weight {
  TensorDesc desc;
  backend::Buffer* buffer = nullptr;  ///< owned by weight_buffers_; null for a host-resident table
  size_t offset = 0;
  const TensorInfo* host = nullptr;  ///< KILN_TENSOR_HOST: the mapped checkpoint tensor
};

struct ModelHost::CacheTensors {
  TensorDesc k, v;
  std::unique_ptr<backend::Buffer> kbuf, vbuf;
  TensorDesc state[2];
  std::unique_ptr<backend::Buffer> sbuf[2];
};

/** One batch input: where it sits in a slot's inputs buffer. */
struct InputSlot {
  std::string name;
  TensorDesc desc;
  size_t offset = 0;
  std::string gather_table;  ///< a host-gathered input: the host-resident table it reads ...
  std::string gather_ids;    ///< ... by this input's ids
};

/** A graph built for one batch shape, with what running it needs. */
struct ModelHost::Graph {
  std::string key;
  graph::Graph graph;
  graph::Plan plan;
  std::vector<InputSlot> inputs;  ///< laid out in one buffer, 256-byte aligned
  size_t input_bytes = 0;
  uint32_t logits = 0;
  uint32_t candidates = 0;  ///< k of the TOP_K appended to the logits (0: the logits are read back)
  uint32_t candidate_tensor = 0;
  std::vector<std::pair<std::string, uint32_t>> dumps;
  /** Where the logits or candidates (first) and the dumps land in a slot's readback buffer, copied
   *  there at the end of each run (Device: BoundGraph::copies_after) and read from there. */
  std::vector<std::pair<uint32_t, size_t>> readback;  ///< tensor, offset
  size_t readback_bytes = 0;
  /** Per step slot: the executable bound to that slot's buffers (of `generation`). */
  std::unique_ptr<backend::Executable> exe[2];
  uint64_t generation[2] = {0, 0};
  const InputSlot* input(std::string_view name) const {
    for (const auto& in : inputs)
      if (in.name == name) return &in;
    return nullptr;
  }
};

/** The buffers of one step in flight. */
struct ModelHost::Slot {
  std::unique_ptr<backend::Buffer> inputs, arena, readback;
  uint64_t generation = 1;  ///< bumped when a buffer is replaced (executables bound to it go)
  bool busy = false;
};

/** A submitted step: what finishing or rolling it back needs. */
struct ModelHost::Flight {
  uint64_t id = 0;
  size_t slot = 0;
  std::shared_ptr<Graph> graph;
  cache::Transaction tx;
  std::vector<uint64_t> seq_ids;  ///< the step's sequences
  std::vector<uint64_t> row_seq;  ///< the sequence of each logits row
  StepTimings timings;
  std::chrono::steady_clock::time_point submitted;
  bool graph_cached = false;
  std::string failed;  ///< non-empty: an earlier step failed and this one was rolled back with it
};

inline TensorDesc make_desc(DType t, const std::vector<int64_t>& shape) {
  TensorDesc d;
  d.dtype = t;
  d.ndim = static_cast<uint32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) d.ne[i] = shape[i];
  return d;
}

inline std::string kiln_error_text(const kiln_error& e, const char* what) {
  return e.message[0] ? std::string(e.message) : std::string(what) + " failed without a message";
}

}  // namespace kiln::model
