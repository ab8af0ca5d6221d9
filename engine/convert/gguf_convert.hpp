// `kiln convert`: a Hugging Face checkpoint to a GGUF file llama.cpp loads, with llama.cpp's tensor
// names, layouts and metadata keys for the architectures kiln serves (export_<arch>.cpp), its
// tokenizer keys, and the file type asked for: a float type as llama.cpp's converter writes it, or
// one of llama-quantize's types (Q4_K_M, Q6_K, ...) with its per-tensor mix and ggml's reference
// quantizers (core/ggml_quantize.hpp), so the file holds what llama-quantize would have made.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kiln::model {
class GgufWriter;
}

namespace kiln::convert {

struct ConvertOptions {
  /** A name convert_types() lists: "auto" (each tensor in the checkpoint's float type), f32, f16,
   *  bf16, q8_0, or llama-quantize's Q4_0 ... Q6_K, Q4_K_M, Q5_K_M, ... */
  std::string type = "auto";
  std::string name;  ///< general.name; default: the checkpoint folder's name
  /** For a checkpoint without tokenizer.json (the project's random-weight models): writes the
   *  tokenizer keys. Unset, tokenizer.json is required. */
  std::function<void(model::GgufWriter&)> vocab;
};

struct ConvertSummary {
  std::string arch;  ///< general.architecture
  size_t tensors = 0;
  uint64_t bytes = 0;                  ///< the tensors' bytes in the file
  std::map<std::string, int> formats;  ///< tensors per format ("q4_K" -> 98)
};

/** Converts the checkpoint at `hf_dir` into `out`. Throws HostError("[convert] ...") naming what to fix. */
ConvertSummary convert_to_gguf(const std::string& hf_dir, const std::string& out, const ConvertOptions& o);

/** The file types ConvertOptions::type accepts. */
std::vector<std::string> convert_types();

}  // namespace kiln::convert
