// The symbolic graph a model builds for one batch, and the builder behind the SDK's kiln_host_ops:
// every op is shape-checked on entry (graph/infer.hpp) so errors name the op and the shapes.
#pragma once

#include <kiln/kiln_plugin.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/tensor.hpp"

namespace kiln::graph {

using backend::TensorDesc;

enum class TensorKind {
  weight,        ///< checkpoint tensor (host-owned buffer)
  input,         ///< batch input: tokens, positions, seqs, ... (host-owned)
  cache,         ///< a layer's cache tensor (host-owned, may be written in place)
  intermediate,  ///< produced by a node; placed in the graph's arena
};

struct Tensor {
  TensorDesc desc;
  TensorKind kind = TensorKind::intermediate;
  std::string name;    ///< weight/input/cache name, or the name given by the plugin
  uint32_t layer = 0;  ///< cache tensors
  int32_t node = -1;   ///< producing node (intermediates)
  uint32_t alias = 0;  ///< nonzero: same memory as this tensor (RESHAPE, SET_ROWS result)
  bool output = false;
};

struct GraphNode {
  kiln_op op = KILN_OP_NONE;
  kiln_op_params params{};
  std::vector<uint32_t> srcs;
  uint32_t dst = 0;
};

/** Tensors are numbered from 1 (0 is the invalid handle of the C ABI). */
class Graph {
 public:
  Graph() : tensors_(1) {}
  uint32_t add_external(TensorKind kind, std::string name, const TensorDesc& desc, uint32_t layer = 0);
  /** Appends a node; throws HostError (from infer) when the op does not fit its sources. */
  uint32_t add_op(kiln_op op, std::span<const uint32_t> srcs, const kiln_op_params& params);
  void set_name(uint32_t t, std::string name);
  void mark_output(uint32_t t);

  bool valid(uint32_t t) const { return t > 0 && t < tensors_.size(); }
  const Tensor& tensor(uint32_t t) const { return tensors_.at(t); }
  /** The tensor whose memory `t` uses (follows aliases). */
  uint32_t base(uint32_t t) const;
  size_t tensor_count() const { return tensors_.size(); }
  const std::vector<GraphNode>& nodes() const { return nodes_; }
  std::vector<uint32_t> outputs() const;
  /** A tensor by external name ("tokens", "blk.0.attn_q.weight") or given name; 0 when absent. */
  uint32_t find(std::string_view name) const;

 private:
  std::vector<Tensor> tensors_;
  std::vector<GraphNode> nodes_;
};

/** What the host knows about names a plugin may ask for (nullopt: absent). */
class Bindings {
 public:
  virtual ~Bindings() = default;
  virtual std::optional<TensorDesc> weight(std::string_view name) = 0;
  virtual std::optional<TensorDesc> input(std::string_view name) = 0;
  virtual std::optional<TensorDesc> cache(uint32_t layer, std::string_view name) = 0;
  /**
   * GET_ROWS of weight `table` by the batch input `ids`: when the host keeps the table in host
   * memory (KILN_TENSOR_HOST) it gathers the rows itself, and this names the input that holds them
   * (input() then knows it). nullopt: the table is on the device (an ordinary GET_ROWS).
   */
  virtual std::optional<std::string> host_gather(std::string_view table, std::string_view ids) {
    (void)table, (void)ids;
    return std::nullopt;
  }
  /** Whether weight `name` is kept in host memory (no op but host_gather's GET_ROWS may read it). */
  virtual bool host_resident(std::string_view name) {
    (void)name;
    return false;
  }
};

/**
 * Builds a Graph through the C op table. Each weight/input/cache is added once (repeated requests
 * return the same handle). Exceptions never cross the table: op() fills kiln_error instead.
 */
class Builder {
 public:
  explicit Builder(Bindings& bindings);
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;
  /** The table to hand to a plugin's build_graph; valid while this builder lives. */
  const kiln_host_ops* host_ops() const { return &ops_; }
  Graph& graph() { return graph_; }
  /** The last error message of a call that returned 0 (empty when none). */
  const std::string& last_error() const { return last_error_; }

  uint32_t weight(std::string_view name);
  uint32_t input(std::string_view name);
  uint32_t cache(uint32_t layer, std::string_view name);
  /** GET_ROWS(table, ids) of a host-resident table: the input holding the gathered rows, else 0. */
  uint32_t host_gather(uint32_t table, uint32_t ids);

 private:
  Bindings& bindings_;
  Graph graph_;
  kiln_host_ops ops_{};
  std::string last_error_;
  // Externals already added, by name (caches by "layer/name"): graphs are rebuilt every step.
  std::unordered_map<std::string, uint32_t> weights_, inputs_, caches_;
};

}  // namespace kiln::graph
