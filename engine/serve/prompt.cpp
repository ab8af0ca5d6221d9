#include "serve/prompt.hpp"

#include <fmt/format.h>

#include "serve/request.hpp"
#include "serve/served_model.hpp"

namespace kiln::serve {

Prompts prompts_of(const ServedModel& model, const GenRequest& r) {
  const char* field = r.chat ? "messages" : "prompt";
  Prompts p;
  try {
    if (r.chat) {
      if (!model.chat_template())
        throw PromptError(fmt::format("model '{}' has no chat template; use /v1/completions, or give it one (kiln "
                                      "serve --chat-template FILE, or chat_template in its YAML)",
                                      model.name()),
                          "model");
      p.ids.push_back(model.encode_chat(*r.chat_input, &p.chat_text));
    } else {
      for (const std::string& text : r.prompt_texts) p.ids.push_back(model.encode(text, true));
      for (const auto& ids : r.prompt_ids) p.ids.push_back(ids);
    }
  } catch (const PromptError&) {
    throw;
  } catch (const std::exception& e) {
    throw PromptError(e.what(), field);
  }
  const uint32_t V = model.n_vocab();
  // -1: none (an int rather than an optional, which g++ 12 wrongly calls maybe-uninitialized here)
  const int32_t bos = model.tokenizer() ? model.tokenizer()->bos_id().value_or(-1) : -1;
  for (auto& ids : p.ids) {
    // Empty, or BOS alone (an empty text encoded): the output starts a text.
    p.from_bos.push_back(ids.empty() || (bos >= 0 && ids.size() == 1 && ids[0] == bos));
    if (ids.empty()) {
      if (bos < 0) throw PromptError("the prompt is empty and the model has no BOS token to start from", field);
      ids.push_back(bos);
    }
    for (int32_t id : ids)
      if (id < 0 || static_cast<uint32_t>(id) >= V)
        throw PromptError(fmt::format("token id {} is outside the vocabulary [0, {})", id, V), field);
  }
  return p;
}

}  // namespace kiln::serve
