// Power's ONNX endpoints of `power serve` (docs/SERVER.md "ONNX models"):
//   POST /v1/audio/vad   WAV body, or multipart/form-data with a `file` part ->
//   {"probs","segments"} POST /v1/ocr         image body or multipart -> {"lines"} POST
//   /v1/classify    28x28 image body or multipart                        -> {"class","scores"}
// The model is picked by `?model=ID` (or a multipart `model` field); absent: the task's only
// model. A signed receipt is asked for with the header `X-Power-Receipt: 1`, `?power_receipt=
// true` or a multipart `power_receipt` field. Execution, admission and receipts are
// onnx::Service's (src/onnx/service.h); this file maps HTTP onto it.
// Thread-safety: the handlers run on the HTTP threads; onnx::Service is thread-safe.
#pragma once

#include <functional>
#include <string>

#include "onnx/service.h"
#include "server/openai_mapping.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace power::server {

struct OnnxHttpContext {
  onnx::Service* service = nullptr;
  int queue_timeout_s = 0;  // > 0: a request still waiting for memory after this long gets 503
  std::function<void(httplib::Response&, const ApiError&)> send_error;
};

void register_onnx_routes(httplib::Server& s, OnnxHttpContext ctx);

// Prometheus text for the service's counters and gauges (appended to GET /metrics).
std::string onnx_metrics_text(const onnx::Service& service);

}  // namespace power::server
