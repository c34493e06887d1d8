// Model plugins: a shared library that adds architectures to `power run|serve --model-lib`.
//
// The library exports one C entry point, power_model_plugin(), returning a PluginInfo whose
// first field is the SDK version it was built against. Power refuses a library whose version
// differs from its own, naming both, before calling anything else in it; otherwise it calls
// register_architectures with its registry. A plugin needs only the SDK headers: it links no
// Power library (everything it calls on Power is a virtual method of an object Power passes
// in). It stays loaded until the process exits.
//
//   static power::Status add(power::sdk::Registry& r) { return r.add({...}); }
//   POWER_MODEL_PLUGIN("my-models", add)
#pragma once

#include <cstdint>

#include "power/sdk/registry.h"
#include "power/sdk/version.h"
#include "power/status.h"

namespace power::sdk {

struct PluginInfo {
  uint32_t sdk_version;  // POWER_SDK_VERSION when the plugin was built; must stay first
  const char* name;
  Status (*register_architectures)(Registry& registry);
};

}  // namespace power::sdk

#define POWER_MODEL_PLUGIN_ENTRY "power_model_plugin"

#define POWER_MODEL_PLUGIN(NAME, REGISTER_FN)                                             \
  extern "C" __attribute__((visibility("default"))) const ::power::sdk::PluginInfo*       \
  power_model_plugin() {                                                                  \
    static const ::power::sdk::PluginInfo info{POWER_SDK_VERSION, (NAME), (REGISTER_FN)}; \
    return &info;                                                                         \
  }
