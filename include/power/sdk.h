// The model SDK: everything a model package includes. See docs/SDK.md for a walk-through
// (GPT-2 in examples/gpt2, built against the installed SDK).
#pragma once

#include "power/sdk/file.h"      // IWYU pragma: export
#include "power/sdk/model.h"     // IWYU pragma: export
#include "power/sdk/ops.h"       // IWYU pragma: export
#include "power/sdk/plugin.h"    // IWYU pragma: export
#include "power/sdk/registry.h"  // IWYU pragma: export
#include "power/sdk/tensor.h"    // IWYU pragma: export
#include "power/sdk/version.h"   // IWYU pragma: export
#include "power/sdk/weights.h"   // IWYU pragma: export
#include "power/status.h"        // IWYU pragma: export
