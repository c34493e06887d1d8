// The GPT-2 package as a model plugin: `power run|serve --model-lib libpower_gpt2.so` adds the
// "gpt2" architecture (gpt2.h) to an unmodified power binary.
//
// Contract: the library exports only power_model_plugin() (POWER_MODEL_PLUGIN, plugin.h),
// reporting the SDK version it was built against; it links no Power library (everything it
// calls on Power is a virtual method of an object Power passes in, or header-only SDK code).
#include "power/sdk/plugin.h"
#include "gpt2.h"

namespace {

power::Status register_gpt2(power::sdk::Registry& registry) {
  return registry.add(gpt2::architecture());
}

}  // namespace

POWER_MODEL_PLUGIN("gpt2", register_gpt2)
