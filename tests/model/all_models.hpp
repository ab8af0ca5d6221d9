// A plugin registry holding every in-tree model plugin (llama, gemma4, qwen3_5), linked statically
// where the build did not already hold them: for tests that run several architectures. The test
// links llama_static, gemma4_static and qwen3_5_static.
#pragma once

#include "plugin/registry.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_llama(uint32_t, uint32_t);
extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_gemma4(uint32_t, uint32_t);
extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_qwen3_5(uint32_t, uint32_t);

namespace kiln::test {

inline PluginRegistry& all_models_registry() {
  static PluginRegistry r;
  static const bool init = [] {
    register_builtin_plugins(r);
    if (!r.find_model_type("llama")) r.register_static(&kiln_plugin_descriptor_llama, "<static llama>");
    if (!r.find_model_type("gemma4_text")) r.register_static(&kiln_plugin_descriptor_gemma4, "<static gemma4>");
    if (!r.find_model_type("qwen3_5")) r.register_static(&kiln_plugin_descriptor_qwen3_5, "<static qwen3_5>");
    return true;
  }();
  (void)init;
  return r;
}

}  // namespace kiln::test
