// ONNX graphs from the command line: `power classify`, `power vad`, `power ocr`, and
// `power onnx inspect` / `power onnx run` (see docs/ONNX.md).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/thread_pool.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "onnx/graph.h"
#include "onnx/media.h"
#include "onnx/models/mnist.h"
#include "onnx/models/paddleocr.h"
#include "onnx/models/silero_vad.h"
#include "onnx/service.h"

namespace power::cli {
namespace {

using nlohmann::json;
using namespace power::onnx;

std::unique_ptr<ThreadPool> make_pool(int threads) {
  return std::make_unique<ThreadPool>(threads < 0 ? 1 : threads);
}

// A model path or a store name (resolve_model_path), loaded as ONNX.
Result<std::shared_ptr<const Model>> load_onnx(const std::string& file_or_name,
                                               const LoadOptions& options = {}) {
  POWER_ASSIGN_OR_RETURN(std::string path, resolve_model_path(file_or_name));
  return Model::load_file(path, options);
}

void print_json(const json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, json::error_handler_t::replace).c_str());
}

// --receipt FILE: the execution goes through onnx::Service, which signs a power.receipt.v1
// over the model files, the input file's bytes and the canonical JSON of the result.
Result<json> run_with_receipt(const ServiceOptions& so, Task task, const std::string& input_path,
                              const VadOptions& vad, const std::string& receipt_path) {
  POWER_ASSIGN_OR_RETURN(
      auto svc, Service::create(so, [](const std::string& m) { return resolve_model_path(m); }));
  POWER_ASSIGN_OR_RETURN(std::string bytes, read_file_text(input_path));
  ExecRequest req;
  req.task = task;
  req.input = bytes;
  req.want_receipt = true;
  req.vad = vad;
  POWER_ASSIGN_OR_RETURN(ExecResult r, svc->execute(req));
  POWER_RETURN_IF_ERROR(write_file_atomic(receipt_path, r.receipt + "\n"));
  return std::move(r.result);
}

json shape_json(const Shape& s) {
  json a = json::array();
  for (int64_t d : s) a.push_back(d);
  return a;
}

std::string dims_text(const ValueInfo& v) {
  if (!v.has_shape) return "?";
  std::string s = "[";
  for (size_t i = 0; i < v.dims.size(); ++i) {
    if (i) s += ", ";
    s += v.dims[i] >= 0 ? std::to_string(v.dims[i])
                        : (v.dim_names[i].empty() ? "?" : v.dim_names[i]);
  }
  return s + "]";
}

// "name=1x3x48x320" or "1x3x48x320" (applies to the next input in order).
Result<Shape> parse_dims(const std::string& text) {
  Shape s;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t x = text.find('x', pos);
    std::string part = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    if (part.empty()) return make_error(StatusCode::kInvalidArgument, "bad shape '{}'", text);
    try {
      size_t used = 0;
      long long v = std::stoll(part, &used);
      if (used != part.size() || v < 0) throw std::invalid_argument(part);
      s.push_back(v);
    } catch (const std::exception&) {
      return make_error(StatusCode::kInvalidArgument, "bad dimension '{}' in shape '{}'", part,
                        text);
    }
    if (x == std::string::npos) break;
    pos = x + 1;
  }
  return s;
}

// Input shapes for plan_memory: declared static dims, overridden by --shape NAME=AxB.
Result<std::vector<Shape>> input_shapes(const Model& m, const std::vector<std::string>& specs) {
  const Graph& g = m.graph();
  std::vector<Shape> shapes(g.inputs.size());
  std::vector<bool> given(g.inputs.size(), false);
  for (const auto& spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos)
      return make_error(StatusCode::kInvalidArgument, "--shape wants NAME=DIMS, got '{}'", spec);
    std::string name = spec.substr(0, eq);
    size_t i = 0;
    while (i < g.input_info.size() && g.input_info[i].name != name) ++i;
    if (i == g.input_info.size())
      return make_error(StatusCode::kNotFound, "model has no input '{}'", name);
    POWER_ASSIGN_OR_RETURN(shapes[i], parse_dims(spec.substr(eq + 1)));
    given[i] = true;
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (given[i]) continue;
    const ValueInfo& v = g.input_info[i];
    for (int64_t d : v.dims) {
      if (d < 0) {
        return make_error(StatusCode::kInvalidArgument,
                          "input '{}' has symbolic shape {}; give one with --shape {}=...", v.name,
                          dims_text(v), v.name);
      }
    }
    shapes[i] = v.dims;
  }
  return shapes;
}

void add_inspect(CLI::App& onnx) {
  auto* cmd = onnx.add_subcommand(
      "inspect",
      "Opset, inputs, outputs, operators, weights and planned peak memory of an ONNX model");
  auto model = std::make_shared<std::string>();
  auto shapes = std::make_shared<std::vector<std::string>>();
  auto as_json = std::make_shared<bool>(false);
  auto no_fuse = std::make_shared<bool>(false);
  cmd->add_option("model", *model, "ONNX file or store name")->required();
  cmd->add_option("--shape", *shapes,
                  "NAME=DxDxD: input shape for the memory plan (symbolic inputs need one)");
  cmd->add_flag("--json", *as_json, "JSON output");
  cmd->add_flag("--no-fuse", *no_fuse, "keep elementwise nodes apart from the Conv they follow");
  auto no_fold = std::make_shared<bool>(false);
  cmd->add_flag("--no-fold", *no_fold, "keep nodes whose inputs are all constants as nodes");
  cmd->callback([=] {
    LoadOptions options;
    options.fuse_elementwise = !*no_fuse;
    options.fold_constants = !*no_fold;
    auto m = load_onnx(*model, options);
    if (!m.ok()) return report_error(m.status());
    const Model& mm = **m;
    const Graph& g = mm.graph();
    json j;
    j["opset"] = mm.opset();
    j["ir_version"] = mm.ir_version();
    j["producer"] = mm.producer();
    j["weight_bytes"] = mm.weight_bytes();
    j["nodes"] = g.nodes.size();
    json ins = json::array(), outs = json::array();
    for (const auto& v : g.input_info)
      ins.push_back({{"name", v.name}, {"type", v.elem_type}, {"shape", dims_text(v)}});
    for (const auto& v : g.output_info)
      outs.push_back({{"name", v.name}, {"type", v.elem_type}, {"shape", dims_text(v)}});
    j["inputs"] = ins;
    j["outputs"] = outs;
    j["operators"] = mm.op_counts();
    j["fused"] = mm.fused_counts();
    j["folded"] = mm.folded_nodes();
    auto sh = input_shapes(mm, *shapes);
    if (sh.ok()) {
      auto plan = mm.plan_memory(*sh);
      if (!plan.ok()) return report_error(plan.status());
      j["plan"] = {{"peak_bytes", plan->peak_bytes},
                   {"complete", plan->complete()},
                   {"unknown_values", plan->unknown_values}};
    } else {
      j["plan"] = {{"error", sh.status().message()}};
    }
    if (*as_json) return print_json(j);
    std::printf("opset %lld, ir_version %lld, producer '%s'\n", static_cast<long long>(mm.opset()),
                static_cast<long long>(mm.ir_version()), mm.producer().c_str());
    for (const auto& v : g.input_info)
      std::printf("input  %s %s\n", v.name.c_str(), dims_text(v).c_str());
    for (const auto& v : g.output_info)
      std::printf("output %s %s\n", v.name.c_str(), dims_text(v).c_str());
    std::printf("nodes %zu, weights %lld bytes\n", g.nodes.size(),
                static_cast<long long>(mm.weight_bytes()));
    for (const auto& [op, n] : mm.op_counts()) std::printf("  %-22s %d\n", op.c_str(), n);
    const auto fused = mm.fused_counts();
    if (!fused.empty()) {
      std::printf("fused into Conv/ConvTranspose:");
      for (const auto& [op, n] : fused) std::printf(" %s %d", op.c_str(), n);
      std::printf("\n");
    }
    if (mm.folded_nodes() > 0) std::printf("folded at load: %d nodes\n", mm.folded_nodes());
    if (j["plan"].contains("peak_bytes")) {
      std::printf(
          "planned peak of intermediates: %lld bytes%s\n", j["plan"]["peak_bytes"].get<long long>(),
          j["plan"]["complete"].get<bool>() ? ""
                                            : " (lower bound: some shapes unknown before running)");
    } else {
      std::printf("memory plan: %s\n", j["plan"]["error"].get<std::string>().c_str());
    }
  });
}

void add_run(CLI::App& onnx) {
  auto* cmd = onnx.add_subcommand("run", "Run an ONNX model on TensorProto (.pb) inputs");
  auto model = std::make_shared<std::string>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto threads = std::make_shared<int>(1);
  auto values = std::make_shared<int>(8);
  auto no_fuse = std::make_shared<bool>(false);
  cmd->add_option("model", *model, "ONNX file or store name")->required();
  cmd->add_option("-i,--input", *inputs, "input tensor file (.pb), one per graph input in order");
  cmd->add_option("-t,--threads", *threads, "threads (default 1)");
  cmd->add_option("--values", *values, "values printed per output (default 8; -1 all)");
  cmd->add_flag("--no-fuse", *no_fuse, "run elementwise nodes apart from the Conv they follow");
  auto no_fold = std::make_shared<bool>(false);
  cmd->add_flag("--no-fold", *no_fold, "run nodes whose inputs are all constants on every call");
  cmd->callback([=] {
    LoadOptions options;
    options.fuse_elementwise = !*no_fuse;
    options.fold_constants = !*no_fold;
    auto m = load_onnx(*model, options);
    if (!m.ok()) return report_error(m.status());
    std::vector<Tensor> in;
    for (const auto& p : *inputs) {
      auto bytes = read_file(p);
      if (!bytes.ok()) return report_error(bytes.status());
      auto t = parse_tensor_proto(bytes->data(), bytes->size());
      if (!t.ok()) return report_error(std::move(t).take_status().with("file", p));
      in.push_back(*t);
    }
    std::vector<Shape> shapes;
    for (const auto& t : in) shapes.push_back(t.shape);
    auto plan = (*m)->plan_memory(shapes);
    auto pool = make_pool(*threads);
    RunStats stats;
    auto out = (*m)->run(in, pool.get(), &stats);
    if (!out.ok()) return report_error(out.status());
    json j;
    json outs = json::array();
    const Graph& g = (*m)->graph();
    for (size_t i = 0; i < out->size(); ++i) {
      const Tensor& t = (*out)[i];
      auto v = to_f64_vector(t);
      json vals = json::array();
      int64_t n = *values < 0 ? t.numel() : std::min<int64_t>(*values, t.numel());
      for (int64_t k = 0; k < n; ++k) vals.push_back((*v)[k]);
      outs.push_back({{"name", g.names[g.outputs[i]]},
                      {"type", std::string(dtype_name(t.dtype))},
                      {"shape", shape_json(t.shape)},
                      {"values", vals}});
    }
    j["outputs"] = outs;
    j["peak_bytes"] = stats.peak_bytes;
    if (plan.ok()) j["planned_peak_bytes"] = plan->peak_bytes;
    print_json(j);
  });
}

void add_classify(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "classify", "Classify an image with an ONNX image classifier (MNIST: 28x28 digits)");
  auto model = std::make_shared<std::string>();
  auto image = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto receipt = std::make_shared<std::string>();
  cmd->add_option("-m,--model", *model, "ONNX model file or store name")->required();
  cmd->add_option("image", *image, "image file (PNG, JPEG, BMP, PNM, TIFF)")->required();
  cmd->add_flag("--json", *as_json, "JSON output: {\"class\":N,\"scores\":[...]}");
  cmd->add_option("--receipt", *receipt, "write a signed power.receipt.v1 of this run to FILE");
  cmd->callback([=] {
    if (!receipt->empty()) {
      ServiceOptions so;
      so.classify_models = {*model};
      auto r = run_with_receipt(so, Task::kClassify, *image, {}, *receipt);
      if (!r.ok()) return report_error(r.status());
      if (*as_json) return print_json(*r);
      return (void)std::printf("%d\n", (*r)["class"].get<int>());
    }
    auto m = load_onnx(*model);
    if (!m.ok()) return report_error(m.status());
    auto img = load_image(*image, 1);
    if (!img.ok()) return report_error(img.status());
    auto r = mnist_classify(**m, *img);
    if (!r.ok()) return report_error(r.status());
    if (*as_json) return print_json(classify_json(r->digit, r->logits));
    std::printf("%d\n", r->digit);
  });
}

void add_vad(CLI::App& app) {
  auto* cmd = app.add_subcommand("vad", "Speech segments of a 16 kHz mono WAV with Silero VAD");
  auto model = std::make_shared<std::string>();
  auto wav = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto opt = std::make_shared<VadOptions>();
  auto threads = std::make_shared<int>(1);
  auto receipt = std::make_shared<std::string>();
  cmd->add_option("-m,--model", *model,
                  "Silero VAD ONNX file (silero_vad_16k_op15.onnx) or store name")
      ->required();
  cmd->add_option("--receipt", *receipt, "write a signed power.receipt.v1 of this run to FILE");
  cmd->add_option("audio", *wav, "mono WAV (16000 or 8000 Hz)")->required();
  cmd->add_flag("--json", *as_json,
                "JSON output: {\"probs\":[...],\"segments\":[{\"start\":s,\"end\":e}]}");
  cmd->add_option("--threshold", opt->threshold, "speech threshold (default 0.5)");
  cmd->add_option("--min-speech-ms", opt->min_speech_ms, "drop shorter segments (default 250)");
  cmd->add_option("--min-silence-ms", opt->min_silence_ms,
                  "silence that ends a segment (default 100)");
  cmd->add_option("--speech-pad-ms", opt->speech_pad_ms, "padding on each side (default 30)");
  cmd->add_option("-t,--threads", *threads, "threads (default 1)");
  cmd->callback([=] {
    if (!(opt->threshold > 0 && opt->threshold < 1)) {
      return report_error(
          make_error(StatusCode::kInvalidArgument, "--threshold must be in (0, 1)"));
    }
    if (opt->min_speech_ms < 0 || opt->min_silence_ms < 0 || opt->speech_pad_ms < 0) {
      return report_error(
          make_error(StatusCode::kInvalidArgument, "durations must not be negative"));
    }
    auto print = [as_json](const json& j) {
      if (*as_json) return print_json(j);
      for (const auto& s : j["segments"])
        std::printf("%.3f %.3f\n", s["start"].get<double>(), s["end"].get<double>());
    };
    if (!receipt->empty()) {
      ServiceOptions so;
      so.vad_models = {*model};
      so.threads = std::max(1, *threads);
      auto r = run_with_receipt(so, Task::kVad, *wav, *opt, *receipt);
      if (!r.ok()) return report_error(r.status());
      return print(*r);
    }
    auto m = load_onnx(*model);
    if (!m.ok()) return report_error(m.status());
    Status valid = SileroVad::validate(**m);
    if (!valid.ok()) return report_error(valid);
    SileroVad vad(*m);
    auto audio = load_audio(*wav);
    if (!audio.ok()) return report_error(audio.status());
    auto pool = make_pool(*threads);
    auto probs = vad.probabilities(audio->samples, audio->sample_rate, pool.get());
    if (!probs.ok()) return report_error(probs.status());
    auto segs = speech_segments(*probs, static_cast<int64_t>(audio->samples.size()),
                                audio->sample_rate, *opt);
    print(vad_json(*probs, segs, audio->sample_rate));
  });
}

void add_ocr(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("ocr", "Text lines of an image with PaddleOCR (detection + recognition)");
  auto det = std::make_shared<std::string>();
  auto rec = std::make_shared<std::string>();
  auto keys = std::make_shared<std::string>();
  auto image = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto line_only = std::make_shared<bool>(false);
  auto threads = std::make_shared<int>(1);
  auto receipt = std::make_shared<std::string>();
  cmd->add_option("--receipt", *receipt, "write a signed power.receipt.v1 of this run to FILE");
  cmd->add_option("--det", *det, "detection model (ch_PP-OCRv4_det_infer.onnx) or store name");
  cmd->add_option("--rec", *rec, "recognition model (ch_PP-OCRv4_rec_infer.onnx) or store name")
      ->required();
  cmd->add_option("--keys", *keys, "character list (ppocr_keys_v1.txt)")->required();
  cmd->add_option("image", *image, "image file (PNG, JPEG, BMP, PNM, TIFF)")->required();
  cmd->add_flag("--line", *line_only,
                "the image is one text line: recognition only, no --det needed");
  cmd->add_flag("--json", *as_json,
                "JSON output: {\"lines\":[{\"text\":...,\"box\":[...],\"score\":...}]}");
  cmd->add_option("-t,--threads", *threads, "threads (default 1)");
  cmd->callback([=] {
    if (!*line_only && det->empty()) {
      return report_error(
          make_error(StatusCode::kInvalidArgument, "--det is required unless --line is given"));
    }
    if (!receipt->empty()) {
      if (*line_only) {
        return report_error(make_error(StatusCode::kInvalidArgument,
                                       "--receipt covers the full pipeline; not with --line"));
      }
      ServiceOptions so;
      so.ocr_det = *det;
      so.ocr_rec = *rec;
      so.ocr_keys = *keys;
      so.threads = std::max(1, *threads);
      auto r = run_with_receipt(so, Task::kOcr, *image, {}, *receipt);
      if (!r.ok()) return report_error(r.status());
      if (*as_json) return print_json(*r);
      for (const auto& l : (*r)["lines"]) std::printf("%s\n", l["text"].get<std::string>().c_str());
      return;
    }
    std::string det_path, rec_path;
    if (!*line_only) {
      auto p = resolve_model_path(*det);
      if (!p.ok()) return report_error(p.status());
      det_path = *p;
    }
    auto rp = resolve_model_path(*rec);
    if (!rp.ok()) return report_error(rp.status());
    rec_path = *rp;
    auto ocr = PaddleOcr::load(det_path, rec_path, *keys);
    if (!ocr.ok()) return report_error(ocr.status());
    auto img = load_image(*image, 3);
    if (!img.ok()) return report_error(img.status());
    auto pool = make_pool(*threads);
    std::vector<OcrLine> lines;
    if (*line_only) {
      auto l = img->height == 48 ? ocr->recognize_h48(*img, pool.get())
                                 : ocr->recognize(*img, pool.get());
      if (!l.ok()) return report_error(l.status());
      lines.push_back(*l);
    } else {
      auto r = ocr->run(*img, {}, pool.get());
      if (!r.ok()) return report_error(r.status());
      lines = std::move(*r);
    }
    if (*as_json) return print_json(ocr_json(lines));
    for (const auto& l : lines) std::printf("%s\n", l.text.c_str());
  });
}

}  // namespace

void add_onnx_commands(CLI::App& app) {
  auto* onnx = app.add_subcommand("onnx", "ONNX graphs: inspect (plan, peak memory) and run");
  onnx->require_subcommand(1);
  add_inspect(*onnx);
  add_run(*onnx);
  add_classify(app);
  add_vad(app);
  add_ocr(app);
}

}  // namespace power::cli
