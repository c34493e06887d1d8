// ONNX's own operator conformance cases (Debian libonnx-testdata, node/): every case whose
// operators are all in supported_operators() is loaded and run; its outputs must match the
// expected .pb tensors (float: |d| <= 1e-5 + 1e-3 |want|, as ONNX's backend tests allow;
// others exactly). Cases rejected with kUnsupported (an attribute variant or element type we
// do not implement) are listed with the reason and excluded; any other outcome fails.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "base/file.h"
#include "onnx/graph.h"
#include "test_util.h"

namespace power::onnx {
namespace {

namespace fs = std::filesystem;
const char* kNodeDir = "/usr/share/libonnx-testdata/data/node";

std::set<std::string> model_ops(const std::string& path) {
  std::set<std::string> ops;
  auto bytes = read_file(path);
  if (!bytes.ok()) return ops;
  ::onnx::ModelProto m;
  if (!m.ParseFromArray(bytes->data(), static_cast<int>(bytes->size()))) return ops;
  std::function<void(const ::onnx::GraphProto&)> walk = [&](const ::onnx::GraphProto& g) {
    for (const auto& n : g.node()) {
      ops.insert(n.domain().empty() || n.domain() == "ai.onnx" ? n.op_type()
                                                               : n.domain() + ":" + n.op_type());
      for (const auto& a : n.attribute())
        if (a.has_g()) walk(a.g());
    }
  };
  walk(m.graph());
  return ops;
}

Result<Tensor> read_pb(const fs::path& p) {
  POWER_ASSIGN_OR_RETURN(auto bytes, read_file(p.string()));
  return parse_tensor_proto(bytes.data(), bytes.size());
}

std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype != want.dtype)
    return fmt::format("dtype {} vs {}", dtype_name(got.dtype), dtype_name(want.dtype));
  if (got.shape != want.shape)
    return fmt::format("shape {} vs {}", shape_str(got.shape), shape_str(want.shape));
  auto g = to_f64_vector(got), w = to_f64_vector(want);
  for (size_t i = 0; i < w->size(); ++i) {
    double a = (*g)[i], b = (*w)[i];
    if (std::isnan(b) && std::isnan(a)) continue;
    bool fp = got.dtype == DType::kF32 || got.dtype == DType::kF64;
    if (fp ? !(std::fabs(a - b) <= 1e-5 + 1e-3 * std::fabs(b)) && !(a == b) : a != b) {
      return fmt::format("element {}: {} vs {}", i, a, b);
    }
  }
  return "";
}

TEST(OnnxConformance, NodeCasesOfSupportedOperatorsPass) {
  if (!fs::exists(kNodeDir)) {
    if (power::testing::running_in_ci()) FAIL() << "CI=true but libonnx-testdata is missing";
    GTEST_SKIP() << "libonnx-testdata not installed (" << kNodeDir << ")";
  }
  auto supported = supported_operators();
  std::set<std::string> sup(supported.begin(), supported.end());
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(kNodeDir)) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  int claimed = 0, passed = 0, excluded = 0;
  std::vector<std::string> failures;
  for (const auto& dir : cases) {
    auto ops = model_ops((dir / "model.onnx").string());
    if (ops.empty() || !std::all_of(ops.begin(), ops.end(),
                                    [&](const std::string& o) { return sup.count(o) > 0; }))
      continue;
    claimed++;
    std::string name = dir.filename().string();
    auto model = Model::load_file((dir / "model.onnx").string());
    if (!model.ok()) {
      if (model.status().code() == StatusCode::kUnsupported) {
        excluded++;
        std::printf("excluded %s: %s\n", name.c_str(), model.status().to_string().c_str());
      } else {
        failures.push_back(name + ": load: " + model.status().to_string());
      }
      continue;
    }
    bool ok = true;
    for (const auto& ds : fs::directory_iterator(dir)) {
      if (!ds.is_directory()) continue;
      std::vector<Tensor> inputs, expected;
      std::string bad;
      for (size_t i = 0;; ++i) {
        auto p = ds.path() / fmt::format("input_{}.pb", i);
        if (!fs::exists(p)) break;
        auto t = read_pb(p);
        if (!t.ok()) {
          bad = t.status().to_string();
          break;
        }
        inputs.push_back(*t);
      }
      for (size_t i = 0;; ++i) {
        auto p = ds.path() / fmt::format("output_{}.pb", i);
        if (!fs::exists(p)) break;
        auto t = read_pb(p);
        if (!t.ok()) {
          bad = t.status().to_string();
          break;
        }
        expected.push_back(*t);
      }
      if (!bad.empty()) {
        excluded++;
        ok = false;
        std::printf("excluded %s: test data: %s\n", name.c_str(), bad.c_str());
        break;
      }
      auto out = (*model)->run(inputs);
      if (!out.ok()) {
        if (out.status().code() == StatusCode::kUnsupported) {
          excluded++;
          std::printf("excluded %s: %s\n", name.c_str(), out.status().to_string().c_str());
        } else {
          failures.push_back(name + ": run: " + out.status().to_string());
        }
        ok = false;
        break;
      }
      for (size_t i = 0; i < expected.size() && i < out->size(); ++i) {
        std::string diff = compare((*out)[i], expected[i]);
        if (!diff.empty()) {
          failures.push_back(name + ": output " + std::to_string(i) + ": " + diff);
          ok = false;
          break;
        }
      }
      if (out->size() < expected.size()) {
        failures.push_back(name + ": fewer outputs");
        ok = false;
      }
      if (!ok) break;
    }
    if (ok) passed++;
  }
  for (const auto& f : failures) std::printf("FAILED %s\n", f.c_str());
  std::printf(
      "onnx conformance (node/): %d/%d passed, %d excluded as unsupported variants, %zu failed\n",
      passed, claimed - excluded, excluded, failures.size());
  EXPECT_TRUE(failures.empty());
  EXPECT_GT(passed, 0);
}

}  // namespace
}  // namespace power::onnx
