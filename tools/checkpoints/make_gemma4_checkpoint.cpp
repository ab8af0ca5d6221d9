// Writes one of the tiny Gemma 4 test checkpoints (tools/checkpoints/gemma4_checkpoint.hpp), for the
// PyTorch reference to compute goldens from (tests/reference/make_goldens.sh):
//   make_gemma4_checkpoint VARIANT DIR [--gguf FILE]
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "gemma4_checkpoint.hpp"

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && std::strcmp(argv[3], "--gguf") == 0)) {
    std::fprintf(stderr, "usage: %s VARIANT DIR [--gguf FILE]   (variants: kitchen_sink 31b_like e4b_like)\n", argv[0]);
    return 2;
  }
  try {
    for (const auto& s : kiln::test::gemma4_variants())
      if (s.name == argv[1]) {
        kiln::test::write_gemma4_hf(s, argv[2]);
        if (argc == 5) kiln::test::write_gemma4_gguf(s, argv[4]);
        return 0;
      }
    std::fprintf(stderr, "unknown variant '%s' (kitchen_sink 31b_like e4b_like)\n", argv[1]);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
