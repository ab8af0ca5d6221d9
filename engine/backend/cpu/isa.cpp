// CPU feature detection and the KILN_CPU_ISA override.
#include "backend/cpu/isa.hpp"

#if defined(KILN_SIMD_X86)
#include <cpuid.h>
#endif

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

#if defined(KILN_SIMD_X86)
namespace {

/** CPUID feature bits and the OS's enabled register state (XCR0), read directly: compilers
    disagree on which names __builtin_cpu_supports knows (clang 14 lacks "f16c"). */
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false,
       avx512vnni = false;
};

CpuFeatures read_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  unsigned xlo = 0, xhi = 0;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const bool ymm_state = (xlo & 0x6) == 0x6, zmm_state = (xlo & 0xe6) == 0xe6;
  if (!ymm_state || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = b & (1u << 5);
  if (!zmm_state) return f;
  f.avx512f = b & (1u << 16);
  f.avx512dq = b & (1u << 17);
  f.avx512bw = b & (1u << 30);
  f.avx512vl = b & (1u << 31);
  f.avx512vnni = c & (1u << 11);
  return f;
}

}  // namespace
#endif

Isa detect_isa() {
#if defined(KILN_SIMD_X86)
  const CpuFeatures f = read_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  if (avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni) return Isa::avx512;
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
      return "avx512 kernels (AVX-512 F, BW, VL, DQ, VNNI)";
  }
  return "?";
}

}  // namespace kiln::backend::simd
