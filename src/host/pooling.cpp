#include "host/pooling.h"

#include <cmath>

namespace power {

const char* pooling_name(sdk::Pooling p) {
  switch (p) {
    case sdk::Pooling::kNone:
      return "none";
    case sdk::Pooling::kMean:
      return "mean";
    case sdk::Pooling::kCls:
      return "cls";
    case sdk::Pooling::kLast:
      return "last";
  }
  return "?";
}

Result<sdk::Pooling> parse_pooling(std::string_view name) {
  for (sdk::Pooling p :
       {sdk::Pooling::kNone, sdk::Pooling::kMean, sdk::Pooling::kCls, sdk::Pooling::kLast}) {
    if (name == pooling_name(p)) return p;
  }
  return Status(StatusCode::kInvalidArgument, "unknown pooling (none, mean, cls, last)")
      .with("pooling", name);
}

void l2_normalize(float* v, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(v[i]) * v[i];
  if (sum <= 0.0) return;
  const auto scale = static_cast<float>(1.0 / std::sqrt(sum));
  for (int64_t i = 0; i < n; ++i) v[i] *= scale;
}

}  // namespace power
