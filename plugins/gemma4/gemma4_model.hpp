// The Gemma 4 model component of the gemma4 plugin (registered in plugin.cpp beside the parsers).
#pragma once

#include <kiln/plugin.hpp>

namespace gemma4 {

/** kiln::model<...> for the model types gemma4 (GGUF, multimodal wrapper) and gemma4_text. */
kiln_component model_component();

}  // namespace gemma4
