// A test plugin built like a user's (only the SDK headers): registers "plugtest_missing",
// whose package requires the tensor blk.0.needed.weight [4, 4] next to the token embedding.
#include <memory>

#include "power/sdk.h"

namespace {

class NeedsATensor final : public power::sdk::Model {
 public:
  power::Status load(const power::sdk::ModelFile&, power::sdk::Weights& w,
                     power::sdk::ModelSpec& spec) override {
    w.require("token_embd.weight", {4, 8}, power::sdk::kUseRows);
    w.require("blk.0.needed.weight", {4, 4}, power::sdk::kUseMatmul);
    spec.n_vocab = 8;
    spec.n_embd = 4;
    spec.uses({power::sdk::Op::kEmbed});
    return power::Status();
  }
  void plan(power::sdk::Planner&) override {}
  power::Status forward(power::sdk::Forward&) const override { return power::Status(); }
};

power::Status add(power::sdk::Registry& r) {
  power::sdk::Architecture a;
  a.name = "plugtest_missing";
  a.description = "a test plugin whose package needs a tensor the test file lacks";
  a.create = [] { return std::make_unique<NeedsATensor>(); };
  return r.add(std::move(a));
}

}  // namespace

POWER_MODEL_PLUGIN("plugtest-missing", add)
