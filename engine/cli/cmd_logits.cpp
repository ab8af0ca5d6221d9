// kiln logits: the logits a model gives for a list of token ids, as JSON (no tokenizer needed).
#include <fmt/format.h>

#include <cstdio>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "core/error.hpp"
#include "model/model_host.hpp"

namespace kiln::cli {
namespace {

void print_row(const float* v, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += fmt::format("{}{}", i ? "," : "", v[i]);
  s += "]";
  std::fputs(s.c_str(), stdout);
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--model", "--ids", "--device", "--config"}, {"--all"});
  if (!args.ok()) return usage_error("logits", args.error());
  if (!args.has("--model") || !args.has("--ids")) return usage_error("logits", "--model and --ids are required");
  std::vector<int32_t> ids;
  if (!parse_id_list(args.value("--ids"), &ids))
    return usage_error("logits", "--ids must be comma-separated non-negative integers, e.g. --ids 1,5,7,2");
  try {
    Config config = load_config_or_empty(args.value("--config"));
    PluginRegistry registry;
    load_plugins(registry, config);
    model::HostOptions o;
    o.device = args.value("--device", "auto");
    o.cache.memory_bytes = 256ull << 20;
    o.max_seqs = 1;
    o.max_context = static_cast<uint32_t>(ids.size() + 16);
    o.max_batch_tokens = static_cast<uint32_t>(ids.size());
    auto host = model::ModelHost::open(args.value("--model"), registry, o);
    const uint32_t V = host->hparams().n_vocab;
    for (int32_t id : ids)
      if (static_cast<uint32_t>(id) >= V) return failure("logits", fmt::format("id {} is outside the vocabulary ({} ids)", id, V));
    if (host->add_sequence(0) != cache::Status::ok) return failure("logits", "cannot start a sequence");
    model::StepResult r;
    const model::StepStatus st = host->step({{0, ids, true, args.flag("--all")}}, &r);
    if (!st.ok()) return failure("logits", st.message);
    if (args.flag("--all")) {
      std::fputs("[", stdout);
      for (uint32_t row = 0; row < r.rows; ++row) {
        if (row) std::fputs(",\n", stdout);
        print_row(r.logits.data() + size_t{row} * V, V);
      }
      std::fputs("]\n", stdout);
    } else {
      print_row(r.logits.data(), V);
      std::fputs("\n", stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    return failure("logits", e.what());
  }
}

const bool registered = register_command({
    "logits",
    "print a model's logits for token ids as JSON",
    "usage: kiln logits --model PATH --ids 1,5,7,2 [--all] [--device DEV] [--config FILE]\n\n"
    "Runs the ids as one prompt and prints the logits of the last position as a JSON array\n"
    "(--all: one array per position). Needs no tokenizer files.\n\n"
    "  --model PATH   Hugging Face directory, .safetensors file (config.json beside it) or .gguf file\n"
    "  --ids LIST     comma-separated token ids\n"
    "  --all          print every position's logits\n"
    "  --device DEV   auto (default), cpu, reference, vulkan, vulkan:N (KILN_DEVICE overrides)\n"
    "  --config FILE  a kiln YAML config (for its plugins: section)\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
