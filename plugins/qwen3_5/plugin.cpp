// The qwen3_5 plugin: Qwen3.5, Qwen3.5-MoE and Qwen3-Next models (qwen3_5_model.cpp). Their tool
// calls and reasoning use the qwen3_coder plugin's parsers.
#include <kiln/plugin.hpp>

#include "qwen3_5_model.hpp"

KILN_PLUGIN(qwen3_5, "0.1.0", qwen3_5::model_component())
