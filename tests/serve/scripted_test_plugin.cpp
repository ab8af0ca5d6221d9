// A model plugin for the server's tests that replays a script: its one weight, "script.weight"
// [max_context, vocab], holds at row p the logits for the token after position p, so greedy
// decoding reproduces whatever token sequence the test wrote there (tool calls, reasoning) and the
// whole serving path (parsers, streaming deltas) runs end to end on exact, known output. Model type
// "kiln_test_scripted"; config.json: vocab_size, max_context, throw_at_tokens (build_graph throws
// for batches of that many tokens: a plugin failing, for fault-injection tests). It keeps no cache.
#include <kiln/plugin.hpp>
#include <nlohmann/json.hpp>

namespace scripted {
namespace {

class ScriptedModel : public kiln::Model {
 public:
  explicit ScriptedModel(const kiln::ModelInfo& info) {
    const auto c = nlohmann::json::parse(info.config_json);
    V_ = c.at("vocab_size").get<int64_t>();
    P_ = c.at("max_context").get<int64_t>();
    throw_at_ = c.value("throw_at_tokens", 0u);
  }
  kiln::ModelHparams hparams() const override {
    kiln::ModelHparams h;
    h.n_layers = 1;
    h.n_vocab = static_cast<uint32_t>(V_);
    h.n_embd = static_cast<uint32_t>(V_);
    h.max_context = static_cast<uint32_t>(P_);
    h.architecture = "kiln_test_scripted";
    return h;
  }
  std::vector<kiln::TensorDecl> tensors() const override {
    return {kiln::TensorDecl{"script.weight", KILN_DTYPE_F32, {P_, V_}}};
  }
  kiln::LayerCache layer_cache(uint32_t) const override {
    kiln::LayerCache c;
    c.kind = KILN_CACHE_NONE;
    return c;
  }
  void build_graph(kiln::GraphBuilder& g, const kiln_batch_desc& batch) override {
    if (throw_at_ && batch.n_tokens == throw_at_)
      throw kiln::Error(KILN_ERR_INTERNAL, "[test_scripted] injected failure building a graph");
    kiln_tensor x = g.op(KILN_OP_GET_ROWS, {g.required("script.weight"), g.input("positions")});
    g.output(g.op(KILN_OP_GET_ROWS, {x, g.input("logits_rows")}));
  }

 private:
  int64_t V_ = 0, P_ = 0;
  uint32_t throw_at_ = 0;
};

const char* const kTypes[] = {"kiln_test_scripted", nullptr};

}  // namespace
}  // namespace scripted

KILN_PLUGIN(test_scripted, "0.1.0",
            kiln::model<scripted::ScriptedModel>("test_scripted", scripted::kTypes,
                                                 "replays a scripted token sequence"))
