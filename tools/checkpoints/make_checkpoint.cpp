// Writes one of the tiny test checkpoints, for the PyTorch references to compute goldens from
// (tests/reference/make_goldens.sh):
//   make_checkpoint gemma4 VARIANT DIR [--gguf FILE]    (kitchen_sink 31b_like e4b_like)
//   make_checkpoint qwen3_5 VARIANT DIR [--gguf FILE]   (qwen3_5_moe qwen3_next qwen3_5_dense)
//   make_checkpoint qwen3_5 default DIR --tokenizer QWEN3_DIR --template FILE
//       the toy Qwen3.5 configs/default.yaml serves, with Qwen3's tokenizer files (scripts/setup.sh)
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "gemma4_checkpoint.hpp"
#include "qwen3_5_checkpoint.hpp"

int main(int argc, char** argv) {
  const bool gguf = argc == 6 && std::strcmp(argv[4], "--gguf") == 0;
  const bool with_tokenizer =
      argc == 8 && std::strcmp(argv[4], "--tokenizer") == 0 && std::strcmp(argv[6], "--template") == 0;
  if (argc != 4 && !gguf && !with_tokenizer) {
    std::fprintf(stderr,
                 "usage: %s gemma4 VARIANT DIR [--gguf FILE]   (kitchen_sink 31b_like e4b_like)\n"
                 "       %s qwen3_5 VARIANT DIR [--gguf FILE]  (qwen3_5_moe qwen3_next qwen3_5_dense)\n"
                 "       %s qwen3_5 default DIR --tokenizer QWEN3_DIR --template FILE\n",
                 argv[0], argv[0], argv[0]);
    return 2;
  }
  const std::string family = argv[1], variant = argv[2], dir = argv[3];
  try {
    if (family == "gemma4") {
      for (const auto& s : kiln::test::gemma4_variants())
        if (s.name == variant) {
          kiln::test::write_gemma4_hf(s, dir);
          if (gguf) kiln::test::write_gemma4_gguf(s, argv[5]);
          return 0;
        }
    } else if (family == "qwen3_5") {
      if (variant == "default" && with_tokenizer) {
        kiln::test::write_qwen35_hf(kiln::test::qwen35_default_model(), dir);
        kiln::test::write_qwen35_tokenizer(argv[5], argv[7], dir);
        return 0;
      }
      for (const auto& s : kiln::test::qwen35_variants())
        if (s.name == variant) {
          kiln::test::write_qwen35_hf(s, dir);
          if (gguf) kiln::test::write_qwen35_gguf(s, argv[5]);
          return 0;
        }
    }
    std::fprintf(stderr, "unknown family or variant: %s %s\n", family.c_str(), variant.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
