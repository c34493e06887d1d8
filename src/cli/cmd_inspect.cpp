// `power inspect FILE [--json]` and `power tensor FILE NAME [--dequant] --out OUT`.
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/sha256.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "format/gguf.h"
#include "tensor/quant.h"

namespace power::cli {
namespace {

using nlohmann::json;

json value_to_json(const GgufValue& v) {
  if (const auto* s = v.as_string()) return *s;
  if (const auto* a = v.as_array()) {
    json arr = json::array();
    for (const auto& item : *a) arr.push_back(value_to_json(item));
    return arr;
  }
  if (v.type == GgufValueType::kBool) return v.as_bool().value_or(false);
  if (v.is_float()) return v.as_f64().value_or(0.0);
  if (auto u = v.as_u64()) return *u;
  if (auto i = v.as_i64()) return *i;
  return nullptr;
}

std::string value_to_text(const GgufValue& v, size_t max_items) {
  if (const auto* a = v.as_array()) {
    std::string s = fmt::format("[{} x {}]", gguf_value_type_name(v.array_type), a->size());
    size_t shown = std::min(a->size(), max_items);
    if (shown > 0) {
      s += " [";
      for (size_t i = 0; i < shown; ++i) {
        if (i > 0) s += ", ";
        s += value_to_text((*a)[i], max_items);
      }
      if (shown < a->size()) s += ", ...";
      s += ']';
    }
    return s;
  }
  json j = value_to_json(v);
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 200) text = text.substr(0, 197) + "...";
  return text;
}

std::string shape_text(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

void run_inspect(const std::string& path, bool as_json, size_t max_items) {
  auto file = GgufFile::open(path);
  if (!file.ok()) return report_error(file.status());
  auto digest = sha256_file(path);
  if (!digest.ok()) return report_error(digest.status());
  const GgufFile& g = **file;
  if (as_json) {
    json out;
    out["path"] = path;
    out["sha256"] = to_hex(*digest);
    out["size_bytes"] = g.file_size();
    out["version"] = g.version();
    out["alignment"] = g.alignment();
    out["data_offset"] = g.data_offset();
    json meta = json::object();
    for (const auto& kv : g.metadata()) meta[kv.key] = value_to_json(kv.value);
    out["metadata"] = meta;
    json tensors = json::array();
    for (const auto& t : g.tensors()) {
      tensors.push_back({{"name", t.name},
                         {"type", std::string(ggml_type_name(t.type))},
                         {"shape", t.ne},
                         {"offset", t.file_offset},
                         {"bytes", t.n_bytes}});
    }
    out["tensors"] = tensors;
    std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return;
  }
  std::printf("file:      %s\nsha256:    %s\nsize:      %" PRIu64 " bytes\n", path.c_str(),
              to_hex(*digest).c_str(), g.file_size());
  std::printf("gguf:      version %u, alignment %u, data at %" PRIu64 "\n", g.version(),
              g.alignment(), g.data_offset());
  std::printf("metadata:  %zu keys\n", g.metadata().size());
  for (const auto& kv : g.metadata()) {
    std::printf("  %-44s %-8s %s\n", kv.key.c_str(),
                std::string(gguf_value_type_name(kv.value.type)).c_str(),
                value_to_text(kv.value, max_items).c_str());
  }
  std::printf("tensors:   %zu\n", g.tensors().size());
  std::printf("  %-40s %-7s %-22s %12s %12s\n", "name", "type", "shape", "offset", "bytes");
  for (const auto& t : g.tensors()) {
    std::printf("  %-40s %-7s %-22s %12" PRIu64 " %12" PRIu64 "\n", t.name.c_str(),
                std::string(ggml_type_name(t.type)).c_str(), shape_text(t.ne).c_str(),
                t.file_offset, t.n_bytes);
  }
}

void run_tensor(const std::string& path, const std::string& name, bool dequant,
                const std::string& out_path) {
  auto file = GgufFile::open(path);
  if (!file.ok()) return report_error(file.status());
  const GgufTensor* t = (*file)->find_tensor(name);
  if (t == nullptr) {
    return report_error(Status(StatusCode::kNotFound, "no such tensor").with("tensor", name));
  }
  if (!dequant) {
    Status st = write_file_atomic(out_path, std::span<const uint8_t>(t->data, t->n_bytes));
    if (!st.ok()) report_error(st);
    return;
  }
  std::vector<float> values(t->n_elements());
  Status st = dequantize_row(t->type, t->data, values.data(), static_cast<int64_t>(values.size()));
  if (!st.ok()) return report_error(std::move(st).with("tensor", name));
  st = write_file_atomic(out_path,
                         std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()),
                                                  values.size() * sizeof(float)));
  if (!st.ok()) return report_error(st);
  std::fprintf(stderr, "wrote %zu f32 values of %s (%s %s) to %s\n", values.size(), name.c_str(),
               std::string(ggml_type_name(t->type)).c_str(), shape_text(t->ne).c_str(),
               out_path.c_str());
}

}  // namespace

void add_inspect_commands(CLI::App& app) {
  auto* inspect = app.add_subcommand("inspect", "Print a GGUF file's header, metadata and tensors");
  static std::string inspect_path;
  static bool inspect_json = false;
  static size_t inspect_max_items = 8;
  inspect->add_option("file", inspect_path, "GGUF file")->required();
  inspect->add_flag("--json", inspect_json, "Print JSON (arrays in full)");
  inspect->add_option("--max-array", inspect_max_items, "Array items shown in text output");
  inspect->callback([] { run_inspect(inspect_path, inspect_json, inspect_max_items); });

  auto* tensor = app.add_subcommand("tensor", "Write one tensor's data to a file");
  static std::string tensor_path, tensor_name, tensor_out;
  static bool tensor_dequant = false;
  tensor->add_option("file", tensor_path, "GGUF file")->required();
  tensor->add_option("name", tensor_name, "Tensor name")->required();
  tensor->add_flag("--dequant", tensor_dequant,
                   "Dequantize to little-endian f32 (otherwise the raw stored bytes)");
  tensor->add_option("--out,-o", tensor_out, "Output file")->required();
  tensor->callback([] { run_tensor(tensor_path, tensor_name, tensor_dequant, tensor_out); });
}

}  // namespace power::cli
