// llama.cpp's own libraries as oracles, from the prebuilt node-llama-cpp that scripts/setup.sh
// installs into .cache/llama-oracle: libggml-base (ggml's quantizers and reference dequantizers)
// and libllama (llama_model_quantize: a GGUF to Q4_K_M, Q6_K, IQ4_XS, ... as llama-quantize makes
// them). Loaded with dlopen; tests skip, saying why, where they are not installed.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "source_paths.hpp"

namespace kiln::test {

/** The folder holding node-llama-cpp's prebuilt libllama for this machine, or "" when there is none. */
inline std::filesystem::path llama_oracle_libs() {
  namespace fs = std::filesystem;
  const fs::path bins = fs::path(KILN_TEST_SOURCE_DIR) / ".cache/llama-oracle/node_modules/@node-llama-cpp";
  std::error_code ec;
  for (const auto& pkg : fs::directory_iterator(bins, ec))  // linux-x64, linux-arm64, ...
    for (const auto& dir : fs::directory_iterator(pkg.path() / "bins", ec))
      if (fs::exists(dir.path() / "libggml-base.so")) return dir.path();
  return {};
}

/** dlopen()s `name` from llama_oracle_libs(); nullptr (and `why`) when that fails. */
inline void* open_llama_oracle(const char* name, std::string* why) {
  const auto dir = llama_oracle_libs();
  if (dir.empty()) {
    *why = "node-llama-cpp's prebuilt libraries are not under .cache/llama-oracle (run scripts/setup.sh)";
    return nullptr;
  }
  void* h = dlopen((dir / name).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) *why = std::string("dlopen failed: ") + dlerror();
  return h;
}

/**
 * llama_model_quantize(in, out) to llama_ftype `ftype` (15 = Q4_K_M, 18 = Q6_K, 30 = IQ4_XS, ...:
 * llama.h), on one thread. The params struct is passed as llama.h v0.4.0 lays it out (nthread,
 * then ftype, at its start; the rest as llama_model_quantize_default_params fills it). "" on
 * success, else why not.
 */
inline std::string quantize_with_llama_cpp(const std::string& in, const std::string& out, int32_t ftype) {
  std::string why;
  void* h = open_llama_oracle("libllama.v0.4.0.so", &why);
  if (!h) return why;
  struct Params {  // larger than llama_model_quantize_params: returned through a hidden pointer either way
    unsigned char bytes[512];
  };
  auto defaults = reinterpret_cast<Params (*)()>(dlsym(h, "llama_model_quantize_default_params"));
  auto quantize =
      reinterpret_cast<uint32_t (*)(const char*, const char*, const Params*)>(dlsym(h, "llama_model_quantize"));
  if (!defaults || !quantize) return "libllama lacks llama_model_quantize";
  // Its per-tensor report goes to stderr unless a log callback takes it.
  if (auto log_set = reinterpret_cast<void (*)(void (*)(int, const char*, void*), void*)>(dlsym(h, "llama_log_set")))
    log_set([](int, const char*, void*) {}, nullptr);
  Params p = defaults();
  const int32_t threads = 1;
  std::memcpy(p.bytes, &threads, 4);
  std::memcpy(p.bytes + 4, &ftype, 4);
  if (quantize(in.c_str(), out.c_str(), &p) != 0) return "llama_model_quantize failed on " + in;
  return "";
}

}  // namespace kiln::test
