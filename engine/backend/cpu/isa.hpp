// Which instruction-set variant of the native CPU backend's kernels runs: the best this CPU has,
// unless KILN_CPU_ISA (portable | avx2 | avx512) asks for a lower one (the op tests force each in
// turn).
#pragma once

#include <string>

#include "backend/cpu/kernels.hpp"

namespace kiln::backend::simd {

enum class Isa { portable, avx2, avx512 };

const char* isa_name(Isa isa);
/** The best variant this CPU (and OS) runs: avx512 needs AVX-512 F/BW/VL/DQ/VNNI (+ the avx2 set), avx2 AVX2 + FMA +
 * F16C.
 */
Isa detect_isa();
/**
 * detect_isa(), or KILN_CPU_ISA when set. Asking for a variant this CPU cannot run, or naming none,
 * logs a warning and uses detect_isa().
 */
Isa active_isa();
const Kernels& kernels_for(Isa isa);
/** "avx512 kernels (AVX-512 F, BW, VL, DQ, VNNI)": for the device's driver string and logs. */
std::string describe_isa(Isa isa);

}  // namespace kiln::backend::simd
