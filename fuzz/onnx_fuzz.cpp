// libFuzzer target for the ONNX loader and executor: arbitrary bytes as a model. A model that
// loads is planned and run once on zero inputs of its declared static shapes (small ones
// only). Any crash, sanitizer report or leak is a bug; errors are expected.
//   onnx_fuzz fuzz/corpus/onnx -max_total_time=30
#include <cstddef>
#include <cstdint>

#include "onnx/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace power::onnx;
  auto model = Model::load_bytes(data, size);
  if (!model.ok()) return 0;
  const Graph& g = (*model)->graph();
  std::vector<Tensor> inputs;
  std::vector<Shape> shapes;
  for (const auto& vi : g.input_info) {
    Shape s = vi.dims;
    for (auto& d : s)
      if (d < 0) d = 1;
    int64_t n = shape_numel(s);
    if (n < 0 || n > (1 << 16) || vi.elem_type == 0) return 0;
    auto t = make_tensor(static_cast<DType>(vi.elem_type), s);
    if (!t.ok()) return 0;
    inputs.push_back(*t);
    shapes.push_back(s);
  }
  (void)(*model)->plan_memory(shapes);
  (void)(*model)->run(inputs);
  return 0;
}
