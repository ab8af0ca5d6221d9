// CPU feature detection and the KILN_CPU_ISA override.
#include "backend/simd/isa.hpp"

#include <cstdlib>
#include <string_view>

#include "core/log.hpp"

namespace kiln::backend::simd {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::portable:
      return "portable";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
  }
  return "?";
}

Isa detect_isa() {
#if defined(KILN_SIMD_X86)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (avx512) return Isa::avx512;
  if (avx2) return Isa::avx2;
#endif
  return Isa::portable;
}

Isa active_isa() {
  const Isa best = detect_isa();
  const char* env = std::getenv("KILN_CPU_ISA");
  if (!env || !*env) return best;
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512})
    if (std::string_view(env) == isa_name(isa)) {
      if (isa <= best) return isa;
      log::warn("[backend cpu] KILN_CPU_ISA={} but this CPU runs at most {}; using {}", env, isa_name(best),
                isa_name(best));
      return best;
    }
  log::warn("[backend cpu] KILN_CPU_ISA={} names no variant (portable, avx2, avx512); using {}", env, isa_name(best));
  return best;
}

const Kernels& kernels_for(Isa isa) {
#if defined(KILN_SIMD_X86)
  if (isa == Isa::avx512) return kernels_avx512();
  if (isa == Isa::avx2) return kernels_avx2();
#endif
  (void)isa;
  return kernels_portable();
}

std::string describe_isa(Isa isa) {
  switch (isa) {
    case Isa::portable:
      return "portable kernels";
    case Isa::avx2:
      return "avx2 kernels (AVX2, FMA, F16C)";
    case Isa::avx512:
      return "avx512 kernels (AVX-512 F, BW, VL, DQ)";
  }
  return "?";
}

}  // namespace kiln::backend::simd
