// libFuzzer target (clang, -DKILN_FUZZ=ON): the checkpoint readers driven through the model host on
// arbitrary bytes written as a GGUF file (and as a safetensors file beside a llama config.json):
// opening and loading must fail with an error, never crash or read out of bounds. The seeds are
// the embedded stories260K GGUF's header region, so mutations reach tensor tables and metadata.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "model/model_host.hpp"
#include "plugin/registry.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_llama(uint32_t, uint32_t);

namespace {

kiln::PluginRegistry& registry() {
  static kiln::PluginRegistry r = [] {
    kiln::PluginRegistry reg;
    kiln::register_builtin_plugins(reg);
    if (!reg.find_model_type("llama")) reg.register_static(&kiln_plugin_descriptor_llama, "<static llama>");
    return reg;
  }();
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir = fs::temp_directory_path() / ("kiln_fuzz_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const bool as_safetensors = size > 0 && (data[0] & 1);
  const fs::path file = dir / (as_safetensors ? "model.safetensors" : "model.gguf");
  {
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data) + (size ? 1 : 0), static_cast<std::streamsize>(size ? size - 1 : 0));
  }
  if (as_safetensors) {
    std::ofstream c(dir / "config.json", std::ios::trunc);
    c << R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 1,
             "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 512, "rms_norm_eps": 1e-5,
             "max_position_embeddings": 256})";
  }
  kiln::model::HostOptions o;
  o.device = "cpu";
  o.cache.memory_bytes = 1 << 20;
  o.max_context = 64;
  o.max_seqs = 1;
  o.progress = false;
  try {
    auto host = kiln::model::ModelHost::open(as_safetensors ? dir.string() : file.string(), registry(), o);
  } catch (const kiln::HostError&) {
  } catch (const std::exception&) {
  }
  fs::remove(file);
  return 0;
}
