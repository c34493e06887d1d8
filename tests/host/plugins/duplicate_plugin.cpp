// A test plugin that tries to register an architecture Power already has ("llama").
#include <memory>

#include "power/sdk.h"

namespace {

power::Status add(power::sdk::Registry& r) {
  power::sdk::Architecture a;
  a.name = "llama";
  a.create = [] { return std::unique_ptr<power::sdk::Model>(); };
  return r.add(std::move(a));
}

}  // namespace

POWER_MODEL_PLUGIN("plugtest-duplicate", add)
