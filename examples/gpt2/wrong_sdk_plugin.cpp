// A model plugin that claims another SDK version, for refusal_check.sh: it stands for a library
// built against another release of the SDK, whose C++ interfaces (class layouts, vtables) may
// differ from the running Power's. Power must refuse it naming both versions, before calling
// anything but its entry point.
//
// Contract: exports power_model_plugin() written by hand (not POWER_MODEL_PLUGIN, which always
// reports the version it is compiled with), reporting POWER_SDK_VERSION + 1. Its register
// function must never run; if it does, it fails loudly.
#include "power/sdk/plugin.h"

namespace {

power::Status must_not_run(power::sdk::Registry&) {
  return power::Status(power::StatusCode::kInternal,
                       "a plugin of another SDK version was asked to register");
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const power::sdk::PluginInfo*
power_model_plugin() {
  static const power::sdk::PluginInfo info{POWER_SDK_VERSION + 1, "gpt2-wrong-sdk", must_not_run};
  return &info;
}
