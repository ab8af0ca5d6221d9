// What a generation request prefills: its prompts as token ids, through the same template,
// control-token guard and tokenizer for the engine and for the render endpoints (whose answer a
// router's tokenizer sidecar must be able to trust).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::serve {

class ServedModel;
struct GenRequest;

/** The token ids of each prompt of a request, as prefilled. */
struct Prompts {
  std::vector<std::vector<int32_t>> ids;
  std::vector<bool> from_bos;  ///< per prompt: it was empty (or BOS alone), so the output starts a text
  std::string chat_text;       ///< chat requests: the rendered prompt
};

/** A prompt that cannot be prefilled: the message and the request field it names. */
struct PromptError : std::runtime_error {
  PromptError(const std::string& message, std::string field) : std::runtime_error(message), param(std::move(field)) {}
  std::string param;
};

/** `r`'s prompts for `model` (an empty prompt starts at BOS); throws PromptError. */
Prompts prompts_of(const ServedModel& model, const GenRequest& r);

}  // namespace kiln::serve
