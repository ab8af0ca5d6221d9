// f32 values to ggml's weight block formats, as ggml's reference quantizers (quantize_row_*_ref in
// ggml-quants.c) compute them: what llama.cpp's llama-quantize writes without an importance matrix,
// byte for byte (the tests compare against the libggml that node-llama-cpp ships). `kiln convert`
// writes its GGUF files with these; core/ggml_blocks.hpp has the layouts and the way back.
#pragma once

#include <cstdint>

#include "core/dtype.hpp"

namespace kiln {

/** Whether quantize_blocks writes format `t`. */
bool can_quantize(DType t);

/**
 * Quantizes `n` values (a whole number of blocks, quant_block(t)) to format `t`: q8_0, q4_0, q4_1,
 * q5_0, q5_1, q2_K ... q6_K, iq4_nl or iq4_xs (every format kiln reads). False for other formats
 * and a partial block.
 */
bool quantize_blocks(DType t, const float* src, int64_t n, uint8_t* dst);

}  // namespace kiln
