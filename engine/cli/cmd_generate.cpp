// kiln generate: one prompt in, generated text streamed to stdout (greedy at temperature 0).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/command.hpp"
#include "cli/common.hpp"
#include "core/error.hpp"
#include "sched/sampler.hpp"
#include "serve/engine.hpp"
#include "serve/served_model.hpp"
#include "text/tokenizer.hpp"

namespace kiln::cli {
namespace {

template <class T>
bool number(const Args& a, const char* name, T* out) {
  if (!a.has(name)) return true;
  try {
    size_t used = 0;
    const std::string v = a.value(name);
    if constexpr (std::is_floating_point_v<T>)
      *out = static_cast<T>(std::stod(v, &used));
    else
      *out = static_cast<T>(std::stoull(v, &used));
    return used == v.size();
  } catch (...) {
    return false;
  }
}

int run(const std::vector<std::string>& argv) {
  Args args(argv,
            {"--model", "--prompt", "--prompt-ids", "--max-tokens", "--temperature", "--top-p", "--top-k", "--seed",
             "--device", "--config"},
            {"--chat", "--ids"});
  if (!args.ok()) return usage_error("generate", args.error());
  if (!args.has("--model")) return usage_error("generate", "--model is required");
  if (args.has("--prompt") && args.has("--prompt-ids"))
    return usage_error("generate", "give --prompt or --prompt-ids, not both");
  uint32_t max_tokens = 64;
  sched::SamplingParams sp;
  std::optional<double> temperature;
  double t = 0;
  if (!number(args, "--max-tokens", &max_tokens) || !number(args, "--top-p", &sp.top_p) ||
      !number(args, "--top-k", &sp.top_k) || !number(args, "--seed", &sp.seed) || !number(args, "--temperature", &t))
    return usage_error("generate", "--max-tokens/--top-k/--seed take integers, --temperature/--top-p numbers");
  if (args.has("--temperature")) temperature = t;
  if (max_tokens == 0) return usage_error("generate", "--max-tokens must be at least 1");
  std::vector<int32_t> prompt;
  if (args.has("--prompt-ids") && !parse_id_list(args.value("--prompt-ids"), &prompt))
    return usage_error("generate", "--prompt-ids must be comma-separated non-negative integers");
  try {
    Config config = load_config_or_empty(args.value("--config"));
    PluginRegistry registry;
    load_plugins(registry, config);
    ModelConfig mc;
    mc.name = "generate";
    mc.path = args.value("--model");
    mc.max_seqs = 1;
    mc.cache.memory_bytes = 1ull << 30;
    BackendConfig bc = config.backend.value_or(BackendConfig{});
    bc.kind = args.value("--device", "auto");
    serve::ServedModel served(mc, bc, registry);
    const text::Tokenizer* tok = served.tokenizer();
    if (args.has("--prompt")) {
      if (!tok) return failure("generate", "the model has no tokenizer.json or embedded vocabulary; use --prompt-ids");
      std::string text = args.value("--prompt");
      const bool chat = args.flag("--chat");
      if (chat) {
        if (!served.chat_template()) return failure("generate", "the model has no chat template; drop --chat");
        const nlohmann::json req = {{"messages", {{{"role", "user"}, {"content", text}}}},
                                    {"add_generation_prompt", true}};
        text = served.chat_template()->render_request(req.dump());
      }
      prompt = served.encode(text, !chat);  // plain text: e.g. SentencePiece models' leading BOS
    } else if (args.flag("--chat")) {
      return usage_error("generate", "--chat needs --prompt");
    }
    if (prompt.empty() && (!tok || !tok->bos_id()))
      return usage_error("generate", "the model has no BOS token; give --prompt or --prompt-ids");
    const bool ids_only = !tok || args.flag("--ids");  // a model without a vocabulary answers in ids
    // The server's own engine runs the request (scheduler, sampler, stop handling): the CLI and
    // `kiln serve` cannot disagree. Sampling defaults come from generation_config.json; flags
    // override them.
    auto r = std::make_shared<serve::GenRequest>();
    r->id = "generate";
    r->sampling = served.default_sampling();
    if (temperature) r->sampling.temperature = *temperature;
    if (args.has("--top-p")) r->sampling.top_p = sp.top_p;
    if (args.has("--top-k")) r->sampling.top_k = sp.top_k;
    r->sampling.seed = sp.seed;
    r->prompt_ids.push_back(prompt);  // empty: the engine starts from BOS, and the text at its start
    r->max_tokens = max_tokens;
    r->return_token_ids = true;
    serve::Metrics metrics;
    serve::Engine engine(served, metrics);
    const auto t0 = std::chrono::steady_clock::now();
    engine.submit(r);
    std::string error, param;
    if (r->wait_prepared(std::chrono::hours(1), &error, &param) != serve::GenRequest::Prepared::ok)
      return failure("generate", error.empty() ? std::string("the request timed out") : error);
    double prefill_s = 0;
    uint32_t produced = 0;
    std::vector<serve::Piece> pieces;
    while (r->next(pieces, std::chrono::milliseconds(200))) {
      for (const serve::Piece& p : pieces) {
        if (!p.error.empty()) return failure("generate", p.error);
        if (!p.token_ids.empty() && produced == 0)
          prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (ids_only)
          for (int32_t id : p.token_ids) std::fputs(fmt::format("{}{}", produced++ ? "," : "", id).c_str(), stdout);
        else
          std::fputs(p.text.c_str(), stdout), produced += static_cast<uint32_t>(p.token_ids.size());
      }
      pieces.clear();
      std::fflush(stdout);
    }
    std::fputs("\n", stdout);
    const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t prompt_len = r->usage.prompt_tokens;
    std::fprintf(stderr, "[generate] prompt %zu tokens (%.1f tok/s), generated %u tokens (%.1f tok/s) on %s\n",
                 prompt_len, prefill_s > 0 ? prompt_len / prefill_s : 0.0, produced,
                 produced > 1 && total > prefill_s ? (produced - 1) / (total - prefill_s) : 0.0,
                 served.host().device().info().name.c_str());
    return 0;
  } catch (const std::exception& e) {
    return failure("generate", e.what());
  }
}

const bool registered = register_command({
    "generate",
    "generate text from a prompt (streams to stdout)",
    "usage: kiln generate --model PATH [--prompt TEXT | --prompt-ids 1,2,3] [--chat] [--max-tokens N]\n"
    "                     [--temperature T] [--top-p P] [--top-k K] [--seed S] [--device DEV] [--ids]\n\n"
    "Without a prompt, generation starts from the model's BOS token. Temperature 0 is greedy; the\n"
    "defaults come from generation_config.json (greedy when it has none). Stops at any eos id of\n"
    "config.json / generation_config.json (or the GGUF's) or after --max-tokens (default 64).\n"
    "Text is decoded with tokenizer.json or the GGUF's embedded vocabulary; a model with neither\n"
    "prints ids.\n\n"
    "  --chat         render the prompt as a user message with the model's chat template\n"
    "  --ids          print the generated token ids (comma-separated) instead of text\n"
    "  --device DEV   auto (default), cpu, reference, vulkan, vulkan:N (KILN_DEVICE overrides)\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
