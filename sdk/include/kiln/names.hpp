/**
 * @file names.hpp
 * @brief A model plugin's tensor-name table: one row per tensor role with its Hugging Face and GGUF
 *        spellings, so graph code asks for roles and never spells names.
 *
 * @code
 *   enum class Role { embed, attn_q, ..., count };
 *   static const kiln::NameRow<Role> kRows[] = {
 *       {Role::embed, "model.embed_tokens.weight", "token_embd.weight"},
 *       {Role::attn_q, "model.layers.%d.self_attn.q_proj.weight", "blk.%d.attn_q.weight"},
 *       {Role::experts_gate, "model.layers.%d.mlp.experts.{}.gate_proj.weight", "blk.%d.ffn_gate_exps.weight"},
 *   };
 *   kiln::NameTable<Role> names(kRows, info.format);
 *   // A multimodal wrapper stores the text model under model.language_model.:
 *   if (info.has_prefix("model.language_model.")) names.rewrite_prefix("model.", "model.language_model.");
 *   names(Role::attn_q, 3)  // "model.layers.3.self_attn.q_proj.weight"
 * @endcode
 * "%d" is the layer; "{}" marks a per-expert pattern the host stacks (TensorDecl::stack).
 */
#pragma once

#include <kiln/kiln_plugin.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

template <class Role>
struct NameRow {
  Role role;
  const char* hf;    ///< nullptr: not in Hugging Face checkpoints
  const char* gguf;  ///< nullptr: not in GGUF files
};

template <class Role>
class NameTable {
 public:
  /** `rows` in any order, one per role at most; `format` picks the spelling. */
  template <size_t N>
  NameTable(const NameRow<Role> (&rows)[N], kiln_checkpoint_format format) : rows_(rows, rows + N), format_(format) {}

  /**
   * Hugging Face names starting with `from` start with `to` instead (multimodal wrappers keep the
   * text model under "model.language_model." where the text-only checkpoint has "model.").
   */
  void rewrite_prefix(std::string from, std::string to) {
    from_ = std::move(from);
    to_ = std::move(to);
  }

  /** The checkpoint name of `role` in `layer` ("" when this format has no such tensor). */
  std::string operator()(Role role, int layer = -1) const {
    const char* pattern = spelling(role);
    if (!pattern) return "";
    std::string name = pattern;
    if (std::strstr(pattern, "%d")) {
      char buf[256];
      std::snprintf(buf, sizeof(buf), pattern, layer);
      name = buf;
    }
    if (format_ == KILN_CHECKPOINT_HF && !from_.empty() && name.compare(0, from_.size(), from_) == 0)
      name = to_ + name.substr(from_.size());
    return name;
  }
  /** Whether the spelling is a per-expert pattern ("{}") the host stacks. */
  bool per_expert(Role role) const {
    const char* pattern = spelling(role);
    return pattern && std::strstr(pattern, "{}");
  }
  kiln_checkpoint_format format() const { return format_; }

 private:
  const char* spelling(Role role) const {
    for (const auto& r : rows_)
      if (r.role == role) return format_ == KILN_CHECKPOINT_GGUF ? r.gguf : r.hf;
    return nullptr;
  }
  std::vector<NameRow<Role>> rows_;
  kiln_checkpoint_format format_;
  std::string from_, to_;
};

}  // namespace kiln
