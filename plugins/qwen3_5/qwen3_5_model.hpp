// The model component of the qwen3_5 plugin (registered in plugin.cpp).
#pragma once

#include <kiln/plugin.hpp>

namespace qwen3_5 {

/** kiln::model<...> for qwen3_5(_text), qwen3_5_moe(_text), qwen3_next and their GGUF names. */
kiln_component model_component();

}  // namespace qwen3_5
