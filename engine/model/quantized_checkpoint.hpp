// Hugging Face checkpoints quantized by the methods people publish them with (config.json's
// quantization_config): FP8 e4m3 with block-wise, per-channel or per-tensor scales ("fp8", and
// compressed-tensors' "float-quantized"), AWQ int4 ("awq", GEMM packing), GPTQ int4/int8 ("gptq",
// v1 and v2 zero points, act-order g_idx) and compressed-tensors' "pack-quantized" int4/int8. Each quantized linear's
// stored tensors (qweight, qzeros, scales, g_idx; weight_packed, weight_zero_point; weight_scale_inv, input_scale)
// become the one `.weight` the plugins ask for, unpacked when the checkpoint opens:
//   - integer groups that line up with 32-value blocks become q4_0 (symmetric: q − zero within
//     [−8, 7]) or q8_0 exactly: the block scale is the group's f16 scale and the block's integers
//     are q − zero, so every kernel on every device reads them with no rounding;
//   - anything else (FP8, act-order groups that straddle blocks, scales f16 cannot hold) is
//     dequantized in f32 and rounded once to the checkpoint's torch_dtype (bf16, or f16).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "model/tensor_info.hpp"

namespace kiln::model {

/** Buffers a checkpoint owns (weights unpacked when it opened); TensorInfo::data points into them. */
using OwnedBytes = std::vector<std::shared_ptr<std::vector<std::byte>>>;

/**
 * `tensors` with every quantized linear replaced by its `.weight` (see above) and the quantization's
 * side tensors dropped; the unpacked bytes go to `owned`. `summary` says what was done, for the log
 * ("awq int4 group 128: 196 weights, 196 as q8_0 (exact)"). Throws HostError naming the method, field or
 * tensor for what kiln does not read (other methods, bit widths, packings), and for tensors whose
 * shapes do not agree with each other.
 */
std::vector<TensorInfo> unpack_quantized(const std::string& quantization_config_json, const std::string& torch_dtype,
                                         std::vector<TensorInfo> tensors, OwnedBytes* owned, std::string* summary);

/** An FP8 e4m3 byte (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinities) as f32. */
float fp8_e4m3_to_f32(uint8_t b);

}  // namespace kiln::model
