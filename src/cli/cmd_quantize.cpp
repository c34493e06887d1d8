// `power quantize IN.gguf OUT.gguf TYPE [--pure] [-t THREADS]`: requantizes the 2-D weight
// matrices of a GGUF file to TYPE, copies every other tensor and all metadata, and records
// general.file_type. Rows whose length TYPE's block cannot divide get llama-quantize's
// fallback type (Q2_K/Q3_K/IQ4_XS -> IQ4_NL, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then
// F16); with --pure they are copied unchanged instead.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "format/gguf.h"
#include "tensor/quant.h"

namespace power::cli {
namespace {

// llama.cpp's llama_ftype for a file whose weights are all `type` (the "_S" variant for
// K-quants, which is what an all-one-type K-quant file is called there).
std::optional<uint32_t> file_type_of(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return 0;
    case GgmlType::F16:
      return 1;
    case GgmlType::Q4_0:
      return 2;
    case GgmlType::Q4_1:
      return 3;
    case GgmlType::Q8_0:
      return 7;
    case GgmlType::Q5_0:
      return 8;
    case GgmlType::Q5_1:
      return 9;
    case GgmlType::Q2_K:
      return 10;
    case GgmlType::Q3_K:
      return 11;
    case GgmlType::Q4_K:
      return 14;
    case GgmlType::Q5_K:
      return 16;
    case GgmlType::Q6_K:
      return 18;
    case GgmlType::IQ4_NL:
      return 25;
    case GgmlType::IQ4_XS:
      return 30;
    case GgmlType::BF16:
      return 32;
    default:
      return std::nullopt;
  }
}

std::optional<GgmlType> fallback_of(GgmlType type) {
  switch (type) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::IQ4_XS:
      return GgmlType::IQ4_NL;
    case GgmlType::Q4_K:
      return GgmlType::Q5_0;
    case GgmlType::Q5_K:
      return GgmlType::Q5_1;
    case GgmlType::Q6_K:
      return GgmlType::Q8_0;
    default:
      return GgmlType::F16;
  }
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A weight matrix in llama.cpp's sense: 2-D, named *.weight, not a norm or an embedding of
// positions/token types (those stay in their source precision).
bool is_weight_matrix(const GgufTensor& t) {
  if (t.ne.size() != 2 || !ends_with(t.name, "weight")) return false;
  for (std::string_view skip : {"norm", "position_embd", "token_types", "pos_embd"}) {
    if (t.name.find(skip) != std::string::npos) return false;
  }
  return true;
}

bool row_fits(GgmlType type, uint64_t row) {
  return row % ggml_type_info(type).block_elems == 0;
}

// Writes tensor t requantized to `to` into out (exactly the bytes the new type needs).
Status requantize(const GgufTensor& t, GgmlType to, ThreadPool& pool, std::span<uint8_t> out) {
  const uint64_t row = t.ne[0];
  const uint64_t rows = t.rows();
  uint64_t src_row_bytes = 0, dst_row_bytes = 0;
  if (!ggml_row_bytes(t.type, row, &src_row_bytes) || !ggml_row_bytes(to, row, &dst_row_bytes)) {
    return Status(StatusCode::kInvalidArgument, "row length does not fit the type")
        .with("tensor", t.name);
  }
  if (out.size() != dst_row_bytes * rows) {
    return Status(StatusCode::kInternal, "output size mismatch").with("tensor", t.name);
  }
  std::vector<Status> errors(static_cast<size_t>(pool.size()));
  pool.parallel_for(rows, [&](size_t begin, size_t end, int thread) {
    std::vector<float> buf(row);
    for (size_t r = begin; r < end && errors[thread].ok(); ++r) {
      Status st =
          dequantize_row(t.type, t.data + r * src_row_bytes, buf.data(), static_cast<int64_t>(row));
      if (st.ok()) {
        st =
            quantize_row(to, buf.data(), out.data() + r * dst_row_bytes, static_cast<int64_t>(row));
      }
      if (!st.ok()) errors[thread] = std::move(st).with("tensor", t.name).with("row", r);
    }
  });
  for (auto& e : errors) {
    if (!e.ok()) return e;
  }
  return Status();
}

void run_quantize(const std::string& in_path, const std::string& out_path,
                  const std::string& type_name, bool pure, int threads) {
  auto target = ggml_type_from_name(type_name);
  if (!target || !quantize_supported(*target) || !file_type_of(*target)) {
    return report_error(
        Status(StatusCode::kInvalidArgument,
               "unsupported target type (use F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
               "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL or IQ4_XS)")
            .with("type", type_name));
  }
  auto file = GgufFile::open(in_path);
  if (!file.ok()) return report_error(file.status());
  const GgufFile& in = **file;

  GgufWriter writer(in.alignment());
  for (const auto& kv : in.metadata()) {
    if (kv.key == "general.alignment") continue;  // the writer records its own alignment
    writer.set(kv.key, kv.value);
  }
  writer.set("general.file_type", GgufValue::u32(*file_type_of(*target)));
  writer.set("general.quantization_version", GgufValue::u32(2));

  ThreadPool pool(threads);
  uint64_t bytes_in = 0, bytes_out = 0;
  int n_quantized = 0, n_copied = 0;
  for (const GgufTensor& t : in.tensors()) {
    std::optional<GgmlType> to;
    if (is_weight_matrix(t)) {
      if (row_fits(*target, t.ne[0])) {
        to = *target;
      } else if (!pure) {
        for (auto f = fallback_of(*target); f;
             f = (*f == GgmlType::F16 ? std::nullopt : fallback_of(*f))) {
          if (row_fits(*f, t.ne[0])) {
            to = *f;
            break;
          }
        }
      }
    }
    if (to && !ggml_type_info(t.type).dequant_supported) {
      return report_error(Status(StatusCode::kUnsupported, "cannot dequantize the source type")
                              .with("tensor", t.name)
                              .with("type", ggml_type_name(t.type)));
    }
    // Quantized tensors are produced while the file is written, one at a time; copied ones
    // are written straight from the input's mapping.
    Status st;
    uint64_t out_bytes = t.n_bytes;
    if (to && *to != t.type) {
      if (!ggml_row_bytes(*to, t.ne[0], &out_bytes)) {
        return report_error(Status(StatusCode::kInternal, "row size").with("tensor", t.name));
      }
      out_bytes *= t.rows();
      const GgmlType dst = *to;
      st = writer.add_tensor_deferred(t.name, dst, t.ne, [&t, dst, &pool](std::span<uint8_t> out) {
        return requantize(t, dst, pool, out);
      });
      ++n_quantized;
    } else {
      to = t.type;
      st =
          writer.add_tensor_view(t.name, t.type, t.ne, std::span<const uint8_t>(t.data, t.n_bytes));
      ++n_copied;
    }
    if (!st.ok()) return report_error(st);
    std::fprintf(stderr, "  %-40s %-6s -> %-6s %10llu bytes\n", t.name.c_str(),
                 std::string(ggml_type_name(t.type)).c_str(),
                 std::string(ggml_type_name(*to)).c_str(),
                 static_cast<unsigned long long>(out_bytes));
    bytes_in += t.n_bytes;
    bytes_out += out_bytes;
  }
  Status st = writer.write(out_path);
  if (!st.ok()) return report_error(st);
  std::fprintf(
      stderr, "quantized %d tensors, copied %d; tensor data %.2f MiB -> %.2f MiB; wrote %s\n",
      n_quantized, n_copied, bytes_in / 1048576.0, bytes_out / 1048576.0, out_path.c_str());
}

}  // namespace

void add_quantize_commands(CLI::App& app) {
  auto* q = app.add_subcommand("quantize", "Requantize a GGUF file's weight matrices");
  static std::string in_path, out_path, type_name;
  static bool pure = false;
  static int threads = 0;
  q->add_option("input", in_path, "Source GGUF file")->required();
  q->add_option("output", out_path, "Destination GGUF file")->required();
  q->add_option("type", type_name, "Target ggml type, e.g. Q4_K, Q8_0, F16")->required();
  q->add_flag("--pure", pure,
              "No fallback type: matrices whose rows TYPE cannot hold are copied unchanged");
  q->add_option("-t,--threads", threads, "Threads (0 = all cores)");
  q->callback([] { run_quantize(in_path, out_path, type_name, pure, threads); });
}

}  // namespace power::cli
