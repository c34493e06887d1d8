#include "server/onnx_http.h"

#include <httplib.h>

#include <fmt/format.h>

#include "base/sha256.h"

namespace power::server {

using json = nlohmann::json;

namespace {

// A parameter from the query string or, for multipart bodies, a form field.
std::optional<std::string> param(const httplib::Request& req, const std::string& name) {
  if (req.has_param(name)) return req.get_param_value(name);
  if (req.is_multipart_form_data() && req.has_file(name)) {
    auto f = req.get_file_value(name);
    if (f.filename.empty()) return f.content;
  }
  return std::nullopt;
}

std::optional<ApiError> read_bool_param(const httplib::Request& req, const std::string& name,
                                        bool* out) {
  auto v = param(req, name);
  if (!v) return std::nullopt;
  if (*v == "1" || *v == "true") {
    *out = true;
  } else if (*v == "0" || *v == "false") {
    *out = false;
  } else {
    return bad_request(fmt::format("'{}' must be true/false or 1/0", name), name);
  }
  return std::nullopt;
}

template <typename T>
std::optional<ApiError> read_number_param(const httplib::Request& req, const std::string& name,
                                          double lo, double hi, T* out) {
  auto v = param(req, name);
  if (!v) return std::nullopt;
  try {
    size_t used = 0;
    const double d = std::stod(*v, &used);
    if (used != v->size() || !(d >= lo && d <= hi)) throw std::invalid_argument(*v);
    *out = static_cast<T>(d);
  } catch (const std::exception&) {
    return bad_request(fmt::format("'{}' must be a number between {} and {}", name, lo, hi), name);
  }
  return std::nullopt;
}

void handle(const OnnxHttpContext& ctx, onnx::Task task, const httplib::Request& req,
            httplib::Response& res) {
  onnx::ExecRequest er;
  er.task = task;
  std::string multipart_body;
  if (req.is_multipart_form_data()) {
    if (!req.has_file("file")) {
      return ctx.send_error(res, bad_request("the multipart body has no 'file' part", "file"));
    }
    multipart_body = req.get_file_value("file").content;
    er.input = multipart_body;
  } else {
    er.input = req.body;
  }
  if (er.input.empty()) {
    return ctx.send_error(
        res, bad_request(task == onnx::Task::kVad
                             ? "the request body is empty: send a WAV file (or multipart 'file')"
                             : "the request body is empty: send an image (or multipart 'file')",
                         "file"));
  }
  if (auto m = param(req, "model")) er.model = *m;
  const std::string hdr = req.get_header_value("X-Power-Receipt");
  if (!hdr.empty()) {
    if (hdr == "1" || hdr == "true") {
      er.want_receipt = true;
    } else if (hdr != "0" && hdr != "false") {
      return ctx.send_error(
          res, bad_request("X-Power-Receipt must be 1/true or 0/false", "X-Power-Receipt"));
    }
  }
  if (auto e = read_bool_param(req, "power_receipt", &er.want_receipt)) {
    return ctx.send_error(res, *e);
  }
  if (task == onnx::Task::kVad) {
    if (auto e = read_number_param(req, "threshold", 0.001, 0.999, &er.vad.threshold)) {
      return ctx.send_error(res, *e);
    }
    if (auto e = read_number_param(req, "min_speech_ms", 0, 3.6e6, &er.vad.min_speech_ms)) {
      return ctx.send_error(res, *e);
    }
    if (auto e = read_number_param(req, "min_silence_ms", 0, 3.6e6, &er.vad.min_silence_ms)) {
      return ctx.send_error(res, *e);
    }
    if (auto e = read_number_param(req, "speech_pad_ms", 0, 3.6e6, &er.vad.speech_pad_ms)) {
      return ctx.send_error(res, *e);
    }
  }
  if (ctx.queue_timeout_s > 0) {
    er.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(ctx.queue_timeout_s);
  }
  auto out = ctx.service->execute(er);
  if (!out.ok()) {
    ApiError e = error_from_status(out.status());
    if (out.status().code() == StatusCode::kNotFound) {
      e.param = "model";
      e.code = "model_not_found";
    }
    return ctx.send_error(res, e);
  }
  json answer = std::move(out->result);
  answer["model"] = out->model;
  if (!out->receipt.empty()) {
    answer["power_receipt"] = out->receipt;
    res.set_header("X-Power-Receipt-SHA256", sha256_hex(out->receipt));
  }
  res.status = 200;
  res.set_content(to_wire(answer), "application/json");
}

std::string label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

void register_onnx_routes(httplib::Server& s, OnnxHttpContext ctx) {
  if (ctx.service == nullptr) return;
  s.Post("/v1/audio/vad", [ctx](const httplib::Request& req, httplib::Response& res) {
    handle(ctx, onnx::Task::kVad, req, res);
  });
  s.Post("/v1/ocr", [ctx](const httplib::Request& req, httplib::Response& res) {
    handle(ctx, onnx::Task::kOcr, req, res);
  });
  s.Post("/v1/classify", [ctx](const httplib::Request& req, httplib::Response& res) {
    handle(ctx, onnx::Task::kClassify, req, res);
  });
}

std::string onnx_metrics_text(const onnx::Service& service) {
  const onnx::ServiceStats st = service.stats();
  auto task_of = [&](const std::string& id) -> std::string {
    for (const auto& m : service.models()) {
      if (m.id == id) return onnx::task_name(m.task);
    }
    return "?";
  };
  std::string out;
  out +=
      "# HELP power_onnx_executions_total ONNX executions that returned a result.\n"
      "# TYPE power_onnx_executions_total counter\n";
  for (const auto& [id, pm] : st.models) {
    out += fmt::format("power_onnx_executions_total{{model=\"{}\",task=\"{}\"}} {}\n", label(id),
                       task_of(id), pm.executions);
  }
  out +=
      "# HELP power_onnx_failures_total ONNX executions admitted that then failed.\n"
      "# TYPE power_onnx_failures_total counter\n";
  for (const auto& [id, pm] : st.models) {
    out += fmt::format("power_onnx_failures_total{{model=\"{}\",task=\"{}\"}} {}\n", label(id),
                       task_of(id), pm.failures);
  }
  out +=
      "# HELP power_onnx_rejections_total ONNX requests refused before running, by reason.\n"
      "# TYPE power_onnx_rejections_total counter\n";
  for (const auto& [id, pm] : st.models) {
    for (const char* reason : {"invalid_input", "does_not_fit", "queue_full", "deadline"}) {
      auto it = pm.rejections.find(reason);
      out += fmt::format("power_onnx_rejections_total{{model=\"{}\",reason=\"{}\"}} {}\n",
                         label(id), reason, it == pm.rejections.end() ? 0 : it->second);
    }
  }
  out +=
      "# HELP power_onnx_max_batch The most VAD windows, classify images or OCR lines one model "
      "run stacks (1: unbatched).\n"
      "# TYPE power_onnx_max_batch gauge\n";
  for (const auto& m : service.models()) {
    out += fmt::format("power_onnx_max_batch{{model=\"{}\"}} {}\n", label(m.id), m.max_batch);
  }
  out +=
      "# HELP power_onnx_batch_size VAD windows, classify images or OCR lines (recognizer "
      "runs) per model run (concurrent requests' items are stacked; 1 when an item ran "
      "alone).\n"
      "# TYPE power_onnx_batch_size histogram\n";
  for (const auto& [id, pm] : st.models) {
    uint64_t count = 0, sum = 0;
    for (const auto& [size, n] : pm.batch_sizes) {
      count += n;
      sum += static_cast<uint64_t>(size) * n;
    }
    for (const int le : {1, 2, 4, 8, 16, 32, 64}) {
      uint64_t below = 0;
      for (const auto& [size, n] : pm.batch_sizes)
        if (size <= le) below += n;
      out += fmt::format("power_onnx_batch_size_bucket{{model=\"{}\",le=\"{}\"}} {}\n", label(id),
                         le, below);
    }
    out += fmt::format("power_onnx_batch_size_bucket{{model=\"{}\",le=\"+Inf\"}} {}\n", label(id),
                       count);
    out += fmt::format("power_onnx_batch_size_sum{{model=\"{}\"}} {}\n", label(id), sum);
    out += fmt::format("power_onnx_batch_size_count{{model=\"{}\"}} {}\n", label(id), count);
  }
  out += fmt::format(
      "# HELP power_onnx_running ONNX executions on a compute slot (a batched step counts "
      "once).\n"
      "# TYPE power_onnx_running gauge\npower_onnx_running {}\n"
      "# HELP power_onnx_waiting ONNX executions waiting for memory or a compute slot.\n"
      "# TYPE power_onnx_waiting gauge\npower_onnx_waiting {}\n"
      "# HELP power_onnx_vad_streams VAD requests being run in batched steps.\n"
      "# TYPE power_onnx_vad_streams gauge\npower_onnx_vad_streams {}\n"
      "# HELP power_onnx_reserved_bytes Bytes reserved by admitted ONNX executions.\n"
      "# TYPE power_onnx_reserved_bytes gauge\npower_onnx_reserved_bytes {}\n"
      "# HELP power_onnx_budget_bytes The ONNX executions' memory budget.\n"
      "# TYPE power_onnx_budget_bytes gauge\npower_onnx_budget_bytes {}\n",
      st.running, st.waiting, st.streams, st.reserved_bytes, st.budget_bytes);
  return out;
}

}  // namespace power::server
