// The model SDK's version. A model plugin reports the version it was built against
// (power/sdk/plugin.h); Power loads it only when that equals its own, because the SDK's
// interfaces are C++ classes whose layout any change of version may alter.
#pragma once

#include <cstdint>

#define POWER_SDK_VERSION_MAJOR 1
#define POWER_SDK_VERSION_MINOR 0
// major * 1000 + minor
#define POWER_SDK_VERSION (POWER_SDK_VERSION_MAJOR * 1000 + POWER_SDK_VERSION_MINOR)

namespace power::sdk {

inline constexpr uint32_t kVersion = POWER_SDK_VERSION;

}  // namespace power::sdk
