// A test plugin that reports being built against another SDK version: the entry point is
// written by hand (not with POWER_MODEL_PLUGIN) to say POWER_SDK_VERSION + 1, as a library
// built against a newer SDK would. Power must refuse it before calling its register function,
// which therefore fails the test process if it is ever called.
#include <cstdlib>

#include "power/sdk/plugin.h"

namespace {

power::Status must_not_run(power::sdk::Registry&) {
  std::abort();
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const power::sdk::PluginInfo*
power_model_plugin() {
  static const power::sdk::PluginInfo info{POWER_SDK_VERSION + 1, "wrong-sdk", must_not_run};
  return &info;
}
