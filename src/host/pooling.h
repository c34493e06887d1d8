// Names of the encoders' pooling kinds (sdk::Pooling), and the L2 normalization embeddings
// get on request.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "power/sdk/ops.h"

namespace power {

// bert.pooling_type values (llama.cpp's enum) are sdk::Pooling's: none 0, mean 1, cls 2,
// last 3.
const char* pooling_name(sdk::Pooling p);
// "none" | "mean" | "cls" | "last" -> value; kInvalidArgument otherwise.
Result<sdk::Pooling> parse_pooling(std::string_view name);

// L2-normalizes v in place as the peer does (common_embd_normalize, p = 2): the sum of squares
// in double, each component times the float value of 1 / sqrt(sum). A zero vector stays zero.
void l2_normalize(float* v, int64_t n);

}  // namespace power
