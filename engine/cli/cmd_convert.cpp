// kiln convert: a Hugging Face checkpoint folder to a GGUF file llama.cpp (and kiln) loads.
#include <fmt/format.h>

#include <chrono>

#include "cli/command.hpp"
#include "convert/gguf_convert.hpp"

namespace kiln::cli {
namespace {

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--type", "--name"}, {});
  if (!args.ok()) return usage_error("convert", args.error());
  if (args.positionals().size() != 2) return usage_error("convert", "expected a checkpoint folder and an output file");
  try {
    convert::ConvertOptions o;
    o.type = args.value("--type", "auto");
    o.name = args.value("--name");
    const auto t0 = std::chrono::steady_clock::now();
    const convert::ConvertSummary s = convert::convert_to_gguf(args.positionals()[0], args.positionals()[1], o);
    std::string formats;
    for (const auto& [f, n] : s.formats) formats += fmt::format("{}{} {}", formats.empty() ? "" : ", ", f, n);
    fmt::print(stderr, "convert: {} ({}): {} tensors, {:.1f} MiB ({}) in {:.1f} s\n", args.positionals()[1], s.arch,
               s.tensors, static_cast<double>(s.bytes) / (1 << 20), formats,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return 0;
  } catch (const std::exception& e) {
    return failure("convert", e.what());
  }
}

std::string help() {
  std::string types;
  for (const auto& t : convert::convert_types()) types += (types.empty() ? "" : ", ") + t;
  return "usage: kiln convert HF_DIR OUT.gguf [--type TYPE] [--name NAME]\n\n"
         "Writes the Hugging Face checkpoint in HF_DIR (config.json, *.safetensors, tokenizer.json) as a\n"
         "GGUF file with llama.cpp's names, layouts and metadata, for the architectures kiln serves\n"
         "(Llama, Qwen2, Qwen3, Qwen3-MoE, Qwen3.5, Qwen3.5-MoE, Qwen3-Next, Gemma 4; the text model:\n"
         "vision towers and MTP heads are left out). llama.cpp and kiln both load the result.\n\n"
         "  --type TYPE   " +
         types +
         "\n"
         "                auto (default): each tensor in the checkpoint's float type; f32/f16/bf16/q8_0:\n"
         "                as llama.cpp's converter writes them (1-D tensors, routers and convs stay F32);\n"
         "                Q4_0 ... Q6_K, Q4_K_M, Q5_K_M, IQ4_XS, ...: as llama-quantize makes them from the float\n"
         "                file (its per-tensor mix and fallbacks, ggml's reference quantizers)\n"
         "  --name NAME   general.name (default: the folder's name)\n";
}

const std::string kHelp = help();

const bool registered = register_command({
    "convert",
    "write a Hugging Face checkpoint as a GGUF file (f16, bf16, q8_0, Q4_K_M, Q6_K, ...)",
    kHelp.c_str(),
    &run,
});

}  // namespace
}  // namespace kiln::cli
