// ONNX models: loading (protobuf via Debian's libonnx), a static execution plan, and a
// single-threaded interpreter over it whose kernels may use a thread pool.
//
// Loading parses the ModelProto once, copies every initializer into a shared tensor, checks that
// every node's operator (and its attributes) is one the executor implements — an unsupported
// operator is an error naming the node and the operator, before anything runs — and verifies
// that nodes are topologically sorted. The plan records, for every value, the node after which
// it is dead; the interpreter frees intermediates there. plan_memory() runs ONNX's own shape
// inference for given input shapes and simulates that schedule, so the peak bytes of
// intermediates are known before execution.
// Thread-safety: a loaded Model is immutable; run() may be called from several threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "kernels/cpu/sgemm.h"
#include "onnx/tensor.h"

namespace power {
class ThreadPool;
}

namespace power::onnx {

struct Graph;
struct OpDef;

struct Attr {
  enum Kind { kFloat, kInt, kString, kTensor, kGraph, kFloats, kInts, kStrings };
  Kind kind = kInt;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
};

// One elementwise step of a chain fused into the node that produces its input (a Conv's
// epilogue): t is the running value, s a register that kSave loads with t, and a either one
// constant or, when `channel` is not empty, channel[c] for output channel c (an operand of shape
// [C,1,1] or [1,C,1,1]). Each other step is the float operation the removed node performed,
// operands in its order, so fused results are the same bits.
using FusedStep = EpilogueStep;  // the kernels layer's type (kernels/cpu/sgemm.h)

struct Node {
  std::string op;
  std::string name;
  std::vector<int> inputs;    // value ids; -1 for an omitted optional input
  std::vector<int> outputs;   // value ids; -1 for an omitted optional output
  std::vector<int> captures;  // enclosing-scope values that this node's subgraphs read
  std::map<std::string, Attr> attrs;
  int opset = 0;
  const OpDef* def = nullptr;  // the kernel (ops.h); null for If, which the interpreter runs
  // Elementwise nodes fused into this one's output (Conv, ConvTranspose), applied in order;
  // fused_ops names them for inspection.
  std::vector<FusedStep> epilogue;
  std::vector<std::string> fused_ops;

  bool has(const std::string& a) const { return attrs.count(a) != 0; }
  int64_t attr_i(const std::string& a, int64_t def) const;
  float attr_f(const std::string& a, float def) const;
  std::string attr_s(const std::string& a, const std::string& def) const;
  std::vector<int64_t> attr_ints(const std::string& a) const;  // empty when absent
  std::vector<float> attr_floats(const std::string& a) const;
  std::string label() const;  // "Conv node 'conv1'"
};

struct ValueInfo {
  std::string name;
  int32_t elem_type = 0;  // ONNX type code, 0 unknown
  Shape dims;             // -1 for a symbolic or unknown dimension
  std::vector<std::string> dim_names;
  bool has_shape = false;
};

struct Graph {
  std::string name;
  std::vector<std::string> names;  // value id -> name
  std::unordered_map<std::string, int> ids;
  std::vector<Node> nodes;  // topological order (checked at load)
  std::vector<int> inputs;  // runtime inputs (graph inputs that are not initializers)
  std::vector<ValueInfo> input_info;
  std::vector<int> outputs;
  std::vector<ValueInfo> output_info;
  std::unordered_map<int, Tensor> initializers;  // includes Constant-free weights
  std::vector<std::pair<int, int>> outer_refs;   // (id here, id in the enclosing graph)
  std::vector<int> last_use;  // per value: index of the last node reading it; nodes.size() for
                              // graph outputs; -1 if never read
  Graph* parent = nullptr;
  int folded_nodes = 0;  // nodes run once at load (LoadOptions::fold_constants)
};

struct MemoryPlan {
  int64_t peak_bytes = 0;    // peak of live intermediates (kernel-produced buffers)
  int64_t weight_bytes = 0;  // initializers and Constant nodes, held for the model's life
  int unknown_values = 0;    // intermediates whose shape inference left unknown
  bool complete() const { return unknown_values == 0; }
};

struct RunStats {
  int64_t peak_bytes = 0;  // measured peak of live intermediates during the run
  int nodes_run = 0;
};

struct LoadOptions {
  // Fuse chains of elementwise nodes (Relu, Clip, Sigmoid, HardSigmoid, Add/Sub/Mul/Div by a
  // scalar constant or by the chain's input: HardSwish and Swish as exported) into the Conv
  // that produces their input. Results are bit-identical either way; off is for comparison.
  bool fuse_elementwise = true;
  // Run nodes whose inputs are all constants once at load and keep their outputs as weights
  // (Constant nodes, weight slicing and reordering). Same bits either way; off is for comparison.
  bool fold_constants = true;
  // Load for inputs stacked along their leading dimension (microbatching): each runtime
  // input's first dimension becomes symbolic ("batch"; an error when the model fixes it at
  // another size than 1), and a Reshape of a computed value to a constant shape that starts
  // with 1 copies that dimension from its input instead (ONNX's 0), so [1, 256] becomes
  // [B, 256]. This says nothing about whether the graph keeps the rows apart: the caller
  // checks a batch's rows against solo runs (onnx::Service does, at load).
  bool batch_inputs = false;
};

class Model {
 public:
  // Parses and validates; errors are kCorrupt (bytes), kUnsupported (operator, attribute
  // variant, element type, external data), kInvalidArgument (graph structure).
  static Result<std::shared_ptr<const Model>> load_file(const std::string& path,
                                                        const LoadOptions& options = {});
  static Result<std::shared_ptr<const Model>> load_bytes(const void* data, size_t size,
                                                         const LoadOptions& options = {});

  const Graph& graph() const { return *graph_; }
  int64_t opset() const { return opset_; }
  int64_t ir_version() const { return ir_version_; }
  const std::string& producer() const { return producer_; }
  int64_t weight_bytes() const;
  // Operators used by the main graph and its subgraphs, with counts (after fusion).
  std::map<std::string, int> op_counts() const;
  // Elementwise nodes fused into their producers at load, by operator.
  std::map<std::string, int> fused_counts() const;
  // Nodes of the main graph and its subgraphs whose outputs were computed at load (constants).
  int folded_nodes() const;
  // Reshapes whose constant shape LoadOptions::batch_inputs rewrote.
  int batch_reshapes() const { return batch_reshapes_; }

  // Peak memory for inputs of these shapes (one per runtime input, in graph input order);
  // symbolic dims of the declared inputs are replaced by the given ones.
  Result<MemoryPlan> plan_memory(const std::vector<Shape>& input_shapes) const;

  // Runs the graph. inputs are in graph input order; outputs in graph output order.
  // pool may be null (single thread). Intermediates' buffers are recycled from earlier runs;
  // between runs the model keeps some of them (held_buffer_bytes; the bound is BufferPool's).
  Result<std::vector<Tensor>> run(const std::vector<Tensor>& inputs, ThreadPool* pool = nullptr,
                                  RunStats* stats = nullptr) const;
  // Bytes of recycled buffers the model holds between runs.
  int64_t held_buffer_bytes() const { return buffers_->held_bytes(); }

 private:
  Model() = default;
  std::shared_ptr<Graph> graph_;
  int64_t opset_ = 0;
  int64_t ir_version_ = 0;
  std::string producer_;
  int batch_reshapes_ = 0;
  std::string shape_model_;  // serialized ModelProto without large weights, for shape inference
  // Intermediates' buffers recycled between runs (tensor.h BufferPool).
  std::shared_ptr<BufferPool> buffers_ = BufferPool::create();
};

// A serialized ONNX TensorProto (the .pb files of ONNX's test data, `power onnx run --input`).
Result<Tensor> parse_tensor_proto(const void* data, size_t size, std::string* name = nullptr);

// Names of the operators (default ONNX domain) the executor implements.
std::vector<std::string> supported_operators();

}  // namespace power::onnx
