#include "onnx/graph.h"

#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <unordered_set>

#include "base/file.h"
#include "onnx/ops.h"

namespace power::onnx {

int64_t Node::attr_i(const std::string& a, int64_t def) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? def : it->second.i;
}
float Node::attr_f(const std::string& a, float def) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? def : it->second.f;
}
std::string Node::attr_s(const std::string& a, const std::string& def) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? def : it->second.s;
}
std::vector<int64_t> Node::attr_ints(const std::string& a) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? std::vector<int64_t>{} : it->second.ints;
}
std::vector<float> Node::attr_floats(const std::string& a) const {
  auto it = attrs.find(a);
  return it == attrs.end() ? std::vector<float>{} : it->second.floats;
}
std::string Node::label() const {
  return name.empty() ? fmt::format("{} node", op) : fmt::format("{} node '{}'", op, name);
}

namespace {

constexpr int64_t kMaxDims = 16;

Result<Tensor> tensor_from_proto(const ::onnx::TensorProto& p) {
  if (p.data_location() == ::onnx::TensorProto::EXTERNAL) {
    return make_error(StatusCode::kUnsupported, "tensor '{}' uses external data", p.name());
  }
  if (!dtype_supported(p.data_type())) {
    return make_error(StatusCode::kUnsupported, "tensor '{}' has unsupported element type {}",
                      p.name(), p.data_type());
  }
  if (p.dims_size() > kMaxDims) {
    return make_error(StatusCode::kCorrupt, "tensor '{}' has {} dimensions", p.name(),
                      p.dims_size());
  }
  DType dt = static_cast<DType>(p.data_type());
  Shape shape(p.dims().begin(), p.dims().end());
  POWER_ASSIGN_OR_RETURN(Tensor t, make_tensor(dt, shape));
  size_t n = static_cast<size_t>(t.numel());
  size_t es = dtype_size(dt);
  if (p.has_raw_data()) {
    if (p.raw_data().size() != n * es) {
      return make_error(StatusCode::kCorrupt,
                        "tensor '{}': raw_data holds {} bytes, shape {} needs {}", p.name(),
                        p.raw_data().size(), shape_str(shape), n * es);
    }
    if (n) std::memcpy(t.buf->data(), p.raw_data().data(), n * es);
    return t;
  }
  auto count_error = [&](size_t have) {
    return make_error(StatusCode::kCorrupt, "tensor '{}': {} values for shape {}", p.name(), have,
                      shape_str(shape));
  };
  switch (dt) {
    case DType::kF32:
      if (static_cast<size_t>(p.float_data_size()) != n) return count_error(p.float_data_size());
      for (size_t i = 0; i < n; ++i) t.mutable_data<float>()[i] = p.float_data(static_cast<int>(i));
      break;
    case DType::kF64:
      if (static_cast<size_t>(p.double_data_size()) != n) return count_error(p.double_data_size());
      for (size_t i = 0; i < n; ++i)
        t.mutable_data<double>()[i] = p.double_data(static_cast<int>(i));
      break;
    case DType::kI64:
      if (static_cast<size_t>(p.int64_data_size()) != n) return count_error(p.int64_data_size());
      for (size_t i = 0; i < n; ++i)
        t.mutable_data<int64_t>()[i] = p.int64_data(static_cast<int>(i));
      break;
    default: {
      if (static_cast<size_t>(p.int32_data_size()) != n) return count_error(p.int32_data_size());
      for (size_t i = 0; i < n; ++i) {
        int32_t v = p.int32_data(static_cast<int>(i));
        uint8_t* dst = t.buf->data() + i * es;
        switch (dt) {
          case DType::kI32:
            std::memcpy(dst, &v, 4);
            break;
          case DType::kI16:
          case DType::kU16: {
            uint16_t u = static_cast<uint16_t>(v);
            std::memcpy(dst, &u, 2);
            break;
          }
          default:
            *dst = static_cast<uint8_t>(v);
            break;
        }
      }
    }
  }
  return t;
}

ValueInfo value_info(const ::onnx::ValueInfoProto& v) {
  ValueInfo vi;
  vi.name = v.name();
  if (v.type().has_tensor_type()) {
    const auto& tt = v.type().tensor_type();
    vi.elem_type = tt.elem_type();
    if (tt.has_shape()) {
      vi.has_shape = true;
      for (const auto& d : tt.shape().dim()) {
        vi.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
        vi.dim_names.push_back(d.has_dim_param() ? d.dim_param() : "");
      }
    }
  }
  return vi;
}

struct Loader {
  int64_t opset = 0;
  bool fuse = true;
  bool fold = true;
  int64_t fold_budget = 0;  // bytes that folded constants may still take (set per model)
  int depth = 0;

  // Id of `name` in g, resolving it through enclosing graphs when g does not define it.
  int resolve(Graph& g, const std::string& name) {
    auto it = g.ids.find(name);
    if (it != g.ids.end()) return it->second;
    if (!g.parent) return -1;
    int pid = resolve(*g.parent, name);
    if (pid < 0) return -1;
    int id = define(g, name);
    g.outer_refs.emplace_back(id, pid);
    return id;
  }
  // Reads of each value: one per input slot and capture, one for a graph output.
  static std::vector<int> count_readers(const Graph& g) {
    std::vector<int> readers(g.names.size(), 0);
    for (const auto& n : g.nodes) {
      for (int id : n.inputs)
        if (id >= 0) readers[id]++;
      for (int id : n.captures) readers[id]++;
    }
    for (int id : g.outputs) readers[id]++;
    return readers;
  }
  // The index of the node producing each value; -1 for inputs and initializers.
  static std::vector<int> find_producers(const Graph& g) {
    std::vector<int> producer(g.names.size(), -1);
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (int id : g.nodes[i].outputs)
        if (id >= 0) producer[id] = static_cast<int>(i);
    return producer;
  }
  // A constant: an initializer, or the value of a Constant node (paddle2onnx exports weights
  // that way). Null for anything else.
  static const Tensor* constant_value(const Graph& g, const std::vector<int>& producer, int id) {
    if (id < 0) return nullptr;
    auto it = g.initializers.find(id);
    if (it != g.initializers.end()) return &it->second;
    const int p = producer[id];
    if (p < 0 || g.nodes[p].op != "Constant") return nullptr;
    auto a = g.nodes[p].attrs.find("value");
    if (a == g.nodes[p].attrs.end() || a->second.kind != Attr::kTensor) return nullptr;
    return &a->second.t;
  }

  // Node n as one step of a chain whose running value is `cur` and whose register holds value
  // `saved`; saved_reads counts n's input slots that read `saved`. False when n is not an
  // elementwise node of that chain with operands the fused kernel reproduces exactly.
  // channels: the Conv's output channel count (0 when unknown), for per-channel operands.
  // An inference BatchNormalization is two steps, x * scale then + shift per channel, with the
  // factors its kernel uses (batch_norm_factors, so the same bits); the second goes to *then
  // (kind kSave when there is none).
  static bool chain_step(const Graph& g, const std::vector<int>& producer, const Node& n, int cur,
                         int saved, int64_t channels, FusedStep& st, int& saved_reads,
                         FusedStep* then) {
    then->kind = FusedStep::kSave;
    if (n.op == "BatchNormalization") {
      if (n.inputs.size() != 5 || n.inputs[0] != cur || n.inputs[0] == saved || channels <= 1 ||
          n.attr_i("training_mode", 0) != 0 || !n.captures.empty() || n.outputs.empty() ||
          n.outputs[0] < 0)
        return false;
      for (size_t o = 1; o < n.outputs.size(); ++o)
        if (n.outputs[o] >= 0) return false;
      const float* p[4];
      for (int k = 0; k < 4; ++k) {
        const Tensor* t = constant_value(g, producer, n.inputs[k + 1]);
        if (!t || t->dtype != DType::kF32 || t->numel() != channels || !t->buf) return false;
        p[k] = t->data<float>();
      }
      st = FusedStep{FusedStep::kMul, 0, 0, {}};
      *then = FusedStep{FusedStep::kAdd, 0, 0, {}};
      st.channel.resize(static_cast<size_t>(channels));
      then->channel.resize(static_cast<size_t>(channels));
      batch_norm_factors(p[0], p[1], p[2], p[3], n.attr_f("epsilon", 1e-5f), channels,
                         st.channel.data(), then->channel.data());
      saved_reads = 0;
      return true;
    }
    if (n.outputs.size() != 1 || n.outputs[0] < 0 || !n.captures.empty()) return false;
    saved_reads = 0;
    for (int id : n.inputs) saved_reads += id == saved;
    // One value: a scalar or [1]; with a rank-4 output (channels known), any shape of ones up
    // to rank 4 ([1,1,1] after a one-channel ConvTranspose), which leaves the shape as it is.
    auto scalar = [&](int id, float& v) {
      const Tensor* t = constant_value(g, producer, id);
      if (!t || t->dtype != DType::kF32 || t->numel() != 1 || t->rank() > (channels > 0 ? 4 : 1) ||
          !t->buf)
        return false;
      v = t->data<float>()[0];
      return true;
    };
    // [C,1,1] or [1,C,1,1]: broadcast against [N,C,H,W] it varies along the channel axis only.
    auto per_channel = [&](int id) {
      const Tensor* t = constant_value(g, producer, id);
      if (!t || t->dtype != DType::kF32 || channels <= 1 || t->numel() != channels || !t->buf)
        return false;
      const int r = t->rank();
      if (r != 3 && !(r == 4 && t->shape[0] == 1)) return false;
      if (t->shape[r - 3] != channels || t->shape[r - 2] != 1 || t->shape[r - 1] != 1) return false;
      const float* v = t->data<float>();
      st.channel.assign(v, v + channels);
      return true;
    };
    const bool unary = n.inputs.size() == 1 && n.inputs[0] == cur;
    if (n.op == "Relu" && unary) {
      st.kind = FusedStep::kRelu;
      return true;
    }
    if (n.op == "Sigmoid" && unary) {
      st.kind = FusedStep::kSigmoid;
      return true;
    }
    if (n.op == "HardSigmoid" && unary) {
      st.kind = FusedStep::kHardSigmoid;
      st.a = n.attr_f("alpha", 0.2f);
      st.b = n.attr_f("beta", 0.5f);
      return true;
    }
    if (n.op == "Clip") {
      if (n.inputs.empty() || n.inputs[0] != cur) return false;
      st.kind = FusedStep::kClip;
      st.a = -INFINITY;
      st.b = INFINITY;
      if (n.opset < 11) {
        if (n.inputs.size() != 1) return false;
        st.a = n.attr_f("min", -INFINITY);
        st.b = n.attr_f("max", INFINITY);
        return true;
      }
      for (size_t k = 1; k < n.inputs.size(); ++k) {
        if (k > 2) return false;
        if (n.inputs[k] >= 0 && !scalar(n.inputs[k], k == 1 ? st.a : st.b)) return false;
      }
      return true;
    }
    const bool add = n.op == "Add", sub = n.op == "Sub", mul = n.op == "Mul", div = n.op == "Div";
    if (!(add || sub || mul || div) || n.inputs.size() != 2) return false;
    const bool first = n.inputs[0] == cur;
    if (!first && n.inputs[1] != cur) return false;
    const int other = first ? n.inputs[1] : n.inputs[0];
    using K = FusedStep::Kind;
    if (other == saved) {
      st.kind = add   ? K::kAddS
                : mul ? K::kMulS
                : sub ? (first ? K::kSubS : K::kRSubS)
                      : (first ? K::kDivS : K::kRDivS);
      return true;
    }
    if (!scalar(other, st.a) && !per_channel(other)) return false;
    st.kind = add   ? K::kAdd
              : mul ? K::kMul
              : sub ? (first ? K::kSub : K::kRSub)
                    : (first ? K::kDiv : K::kRDiv);
    return true;
  }

  // Chains of elementwise nodes after a Conv (an exported BN's Mul/Add, HardSwish as
  // Add/Clip/Div/Mul, Relu, Swish as Sigmoid/Mul, ...) become the Conv's epilogue, applied
  // while its output is in cache: one pass and one buffer instead of one per node. Every value
  // the chain consumes, the Conv's output included, must be read by the chain alone and be no
  // graph output; a value read twice (x in x * clip(x + 3, 0, 6) / 6) is kept in a register.
  void fuse_epilogues(Graph& g) {
    const std::vector<int> readers = count_readers(g);
    const std::vector<int> producer = find_producers(g);
    std::vector<std::vector<int>> readers_of(g.names.size());
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (int id : g.nodes[i].inputs)
        if (id >= 0 && (readers_of[id].empty() || readers_of[id].back() != static_cast<int>(i)))
          readers_of[id].push_back(static_cast<int>(i));
    std::vector<bool> pinned(g.names.size(), false);  // graph outputs and captured values
    for (int id : g.outputs) pinned[id] = true;
    for (const auto& n : g.nodes)
      for (int id : n.captures) pinned[id] = true;
    std::vector<bool> drop(g.nodes.size(), false);
    for (auto& conv : g.nodes) {
      if ((conv.op != "Conv" && conv.op != "ConvTranspose") || conv.outputs.size() != 1 ||
          conv.outputs[0] < 0)
        continue;
      const int y = conv.outputs[0];
      if (pinned[y]) continue;
      // Output channels from a constant 2-D kernel (rank-4 output, where [C,1,1] is per channel):
      // Conv's W is [M, C/group, kh, kw], ConvTranspose's [C, M/group, kh, kw].
      const Tensor* w =
          conv.inputs.size() > 1 ? constant_value(g, producer, conv.inputs[1]) : nullptr;
      int64_t channels = 0;
      if (w && w->rank() == 4 && conv.op == "Conv") channels = w->shape[0];
      if (w && w->rank() == 4 && conv.op == "ConvTranspose") {
        const int64_t group = conv.attr_i("group", 1);  // at most C: no overflow below
        if (group > 0 && group <= w->shape[0]) channels = w->shape[1] * group;
      }
      // steps[0] saves y, the chain's first operand register; a value read by several later
      // nodes of the chain gets its own save step. `saved` is the value in the register and
      // saved_reads its reads by the chain so far.
      std::vector<FusedStep> steps(1, FusedStep{FusedStep::kSave, 0, 0, {}});
      std::vector<int> chain;
      int cur = y, saved = y, saved_reads = 0;
      bool y_read = false;  // a step reads y itself (steps[0] is needed)
      size_t fused_steps = 0, fused_nodes = 0;
      bool fused_y_read = false;
      while (true) {
        if (cur != saved) {
          if (pinned[cur]) break;
          if (readers[cur] > 1) {
            if (saved_reads != readers[saved]) break;
            steps.push_back(FusedStep{FusedStep::kSave, 0, 0, {}});
            saved = cur;
            saved_reads = 0;
          }
        }
        int next = -1;
        for (int r : readers_of[cur])
          if (std::find(chain.begin(), chain.end(), r) == chain.end()) {
            next = r;
            break;
          }
        FusedStep st, then;
        int reads = 0;
        if (next < 0 ||
            !chain_step(g, producer, g.nodes[next], cur, saved, channels, st, reads, &then))
          break;
        steps.push_back(st);
        if (then.kind != FusedStep::kSave) steps.push_back(then);
        chain.push_back(next);
        saved_reads += reads;
        if (saved == y && st.kind >= FusedStep::kAddS && st.kind <= FusedStep::kRDivS)
          y_read = true;
        cur = g.nodes[next].outputs[0];
        if (saved_reads == readers[saved]) {  // every read of the register is in the chain
          fused_steps = steps.size();
          fused_nodes = chain.size();
          fused_y_read = y_read;
        }
      }
      if (fused_nodes == 0) continue;
      for (size_t k = fused_y_read ? 0 : 1; k < fused_steps; ++k) conv.epilogue.push_back(steps[k]);
      for (size_t k = 0; k < fused_nodes; ++k) {
        conv.fused_ops.push_back(g.nodes[chain[k]].op);
        drop[chain[k]] = true;
      }
      const size_t len = fused_nodes;
      conv.outputs[0] = g.nodes[chain[len - 1]].outputs[0];
    }
    remove_nodes(g, drop, readers);
  }

  // An upper bound on the new bytes of node n's outputs for inputs `in`, computed before its
  // kernel runs (a Constant's `value` tensor is shared, not copied; its other forms copy the
  // attribute's list); -1 for operators whose output size the inputs do not bound (Expand, Tile,
  // ConstantOfShape, Range: a small constant could make a large tensor) or that are not worth
  // running here (MatMul, Conv, ...).
  static int64_t folded_bytes_bound(const Node& n, const std::vector<const Tensor*>& in) {
    static const std::unordered_set<std::string> broadcast = {
        "Add",   "Sub",  "Mul",     "Div",         "Pow",
        "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
        "And",   "Or",   "Xor",     "Mod",         "Max",
        "Min",   "Sum",  "Mean",    "Where"};
    static const std::unordered_set<std::string> bounded = {"Identity",    "Reshape",
                                                            "Flatten",     "Squeeze",
                                                            "Unsqueeze",   "Transpose",
                                                            "Concat",      "Slice",
                                                            "Split",       "Shape",
                                                            "Size",        "Cast",
                                                            "Relu",        "Sigmoid",
                                                            "Tanh",        "Exp",
                                                            "Log",         "Sqrt",
                                                            "Erf",         "Reciprocal",
                                                            "Floor",       "Ceil",
                                                            "Sin",         "Cos",
                                                            "Softplus",    "Softsign",
                                                            "HardSigmoid", "HardSwish",
                                                            "LeakyRelu",   "Elu",
                                                            "Neg",         "Abs",
                                                            "Sign",        "Not",
                                                            "Clip",        "Softmax",
                                                            "LogSoftmax",  "ReduceMean",
                                                            "ReduceSum",   "ReduceMax",
                                                            "ReduceMin",   "ReduceSumSquare",
                                                            "ReduceProd",  "ReduceLogSumExp",
                                                            "ArgMax",      "ArgMin"};
    constexpr int64_t kElem = 8;  // the widest element a kernel here writes
    int64_t numel = 0;
    if (n.op == "Constant") {
      for (const auto& [k, a] : n.attrs) numel += a.floats.size() + a.ints.size() + 1;
    } else if (broadcast.count(n.op)) {
      Shape dims;  // per aligned axis, the largest extent among the inputs
      for (const Tensor* t : in) {
        if (!t) continue;
        if (t->shape.size() > dims.size())
          dims.insert(dims.begin(), t->shape.size() - dims.size(), 1);
        for (size_t d = 0; d < t->shape.size(); ++d) {
          int64_t& e = dims[dims.size() - t->shape.size() + d];
          e = std::max(e, t->shape[d]);
        }
      }
      numel = shape_numel(dims);
    } else if (n.op == "Gather") {
      if (in.size() < 2 || !in[0] || !in[1]) return -1;
      numel = in[0]->numel() * std::max<int64_t>(1, in[1]->numel());
    } else if (bounded.count(n.op)) {
      for (const Tensor* t : in)
        if (t) numel += t->numel();
      numel += 64;  // Shape and Size: a few elements
    } else {
      return -1;
    }
    if (numel < 0 || numel > (int64_t{1} << 40)) return -1;
    return numel * kElem * static_cast<int64_t>(std::max<size_t>(1, n.outputs.size()));
  }

  // Nodes whose inputs are all constants (initializers, or outputs of nodes folded before them)
  // run once here, and their outputs become initializers: Constant nodes, and the weight
  // plumbing exporters leave in graphs (Silero VAD slices its LSTM weights and concatenates the
  // gates in ONNX order on every call). The kernel is the one the interpreter would run (on one
  // thread; kernels give the same bits on any thread count). Left to run time: If and nodes with
  // subgraphs, nodes with a graph output (a caller may write into what run() returns), nodes
  // whose kernel fails here (the error then comes at run time, as before), and nodes beyond
  // fold_budget (folded_bytes_bound).
  void fold_constants(Graph& g) {
    if (!fold) return;
    const std::vector<int> readers = count_readers(g);
    std::vector<bool> is_output(g.names.size(), false);
    for (int id : g.outputs) is_output[id] = true;
    std::vector<bool> drop(g.nodes.size(), false);
    OpContext ctx{nullptr};
    std::vector<const Tensor*> in;
    std::vector<Tensor> out;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (!n.def || !n.captures.empty()) continue;
      bool constant = true;
      in.clear();
      for (int id : n.inputs) {
        if (id < 0) {
          in.push_back(nullptr);
          continue;
        }
        const Tensor* t = constant_in_scope(g, id);
        if (!t || !t->buf) {
          constant = false;
          break;
        }
        in.push_back(t);
      }
      for (int id : n.outputs) constant = constant && !(id >= 0 && is_output[id]);
      if (!constant) continue;
      const int64_t bound = folded_bytes_bound(n, in);
      if (bound < 0 || bound > fold_budget) continue;
      out.assign(std::max<size_t>(n.outputs.size(), 3), Tensor{});
      if (!n.def->run(n, in, out, ctx).ok()) continue;
      bool produced = true;
      for (size_t o = 0; o < n.outputs.size(); ++o)
        produced = produced && (n.outputs[o] < 0 || out[o].buf);
      if (!produced) continue;
      for (size_t o = 0; o < n.outputs.size(); ++o) {
        if (n.outputs[o] < 0) continue;
        // Views of an input and a Constant's `value` take no new memory.
        bool shared = n.has("value") && n.attrs.at("value").t.buf == out[o].buf;
        for (const Tensor* t : in) shared = shared || (t && t->buf == out[o].buf);
        if (!shared) fold_budget -= static_cast<int64_t>(out[o].nbytes());
        g.initializers[n.outputs[o]] = std::move(out[o]);
      }
      drop[i] = true;
      g.folded_nodes++;
    }
    remove_nodes(g, drop, readers);
    // What nothing reads any more goes: initializers (the weights a branch sliced are kept only
    // in their folded form) and a subgraph's references to enclosing values (so the node that
    // owns the subgraph no longer captures them).
    const std::vector<int> now = count_readers(g);
    for (auto it = g.initializers.begin(); it != g.initializers.end();)
      it = now[it->first] == 0 ? g.initializers.erase(it) : std::next(it);
    std::erase_if(g.outer_refs, [&](const std::pair<int, int>& r) { return now[r.first] == 0; });
  }

  // The value of id in g when it is a constant: an initializer of g, or (through g's references
  // to enclosing graphs) of a graph around it. Null otherwise.
  static const Tensor* constant_in_scope(const Graph& g, int id) {
    auto it = g.initializers.find(id);
    if (it != g.initializers.end()) return &it->second;
    if (!g.parent) return nullptr;
    for (const auto& [local, outer] : g.outer_refs)
      if (local == id) return constant_in_scope(*g.parent, outer);
    return nullptr;
  }

  // Conv -> BatchNormalization with constant statistics becomes one Conv: per output channel
  // c, s = scale[c] / sqrt(var[c] + epsilon); W'[c] = W[c] * s; b'[c] = (b[c] - mean[c]) * s +
  // B[c]. Only when the Conv's weights (and bias) are initializers and the BN is the Conv
  // output's only reader; the folded weights are new values, so shared initializers stay.
  void fold_batch_norms(Graph& g) {
    const std::vector<int> readers = count_readers(g);
    std::vector<int> producer = find_producers(g);
    auto constant = [&](int id) { return constant_value(g, producer, id); };
    auto f32_init = [&](int id, int64_t n) -> const Tensor* {
      const Tensor* t = constant(id);
      if (!t || t->dtype != DType::kF32 || t->numel() != n || !t->buf) return nullptr;
      return t;
    };
    std::vector<bool> drop(g.nodes.size(), false);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      Node& bn = g.nodes[i];
      if (bn.op != "BatchNormalization" || bn.inputs.size() != 5 || bn.inputs[0] < 0) continue;
      if (bn.attr_i("training_mode", 0) != 0) continue;
      bool extra_outputs = false;
      for (size_t o = 1; o < bn.outputs.size(); ++o) extra_outputs |= bn.outputs[o] >= 0;
      if (extra_outputs || readers[bn.inputs[0]] != 1) continue;
      const int pi = producer[bn.inputs[0]];
      if (pi < 0 || drop[pi]) continue;
      Node& conv = g.nodes[pi];
      const bool transpose = conv.op == "ConvTranspose";
      if ((conv.op != "Conv" && !transpose) || conv.outputs.size() != 1 || conv.inputs.size() < 2)
        continue;
      const Tensor* wp = constant(conv.inputs[1]);
      // An empty weight has nothing to scale (and its channel counts would divide by zero).
      if (!wp || wp->dtype != DType::kF32 || wp->rank() < 3 || !wp->buf || wp->numel() == 0)
        continue;
      const Tensor& w = *wp;
      // Output channel c's weights: Conv's W[c] ([M, C/group, ...]); ConvTranspose's W is
      // [C, M/group, ...], and W[ci, j] feeds output channel (ci / (C/group)) * (M/group) + j.
      const int64_t group = transpose ? conv.attr_i("group", 1) : 1;
      if (group <= 0 || group > w.shape[0] || w.shape[0] % group != 0) continue;
      const int64_t m = transpose ? w.shape[1] * group : w.shape[0];
      const int64_t per = transpose ? w.numel() / (w.shape[0] * w.shape[1]) : w.numel() / m;
      const int64_t in_per_group = w.shape[0] / group;
      auto channel_of = [&](int64_t row) {  // output channel of W's row (Conv) or [ci, j] pair
        return transpose ? (row / w.shape[1]) / in_per_group * w.shape[1] + row % w.shape[1] : row;
      };
      const Tensor* bias = conv.inputs.size() > 2 ? f32_init(conv.inputs[2], m) : nullptr;
      if (conv.inputs.size() > 2 && conv.inputs[2] >= 0 && !bias) continue;
      const Tensor* scale = f32_init(bn.inputs[1], m);
      const Tensor* beta = f32_init(bn.inputs[2], m);
      const Tensor* mean = f32_init(bn.inputs[3], m);
      const Tensor* var = f32_init(bn.inputs[4], m);
      if (!scale || !beta || !mean || !var) continue;
      const float eps = bn.attr_f("epsilon", 1e-5f);
      std::vector<float> nw(static_cast<size_t>(w.numel())), nb(static_cast<size_t>(m)), sc(nb);
      batch_norm_factors(scale->data<float>(), beta->data<float>(), mean->data<float>(),
                         var->data<float>(), eps, m, sc.data(), nullptr);
      for (int64_t c = 0; c < m; ++c) {
        const float b0 = bias ? bias->data<float>()[c] : 0.0f;
        nb[c] = (b0 - mean->data<float>()[c]) * sc[c] + beta->data<float>()[c];
      }
      for (int64_t row = 0; row < w.numel() / per; ++row) {
        const float f = sc[channel_of(row)];
        for (int64_t k = 0; k < per; ++k) nw[row * per + k] = w.data<float>()[row * per + k] * f;
      }
      const Shape wshape = w.shape;
      const int wid = define(g, g.names[bn.outputs[0]] + "/folded_W");
      const int bid = define(g, g.names[bn.outputs[0]] + "/folded_B");
      g.initializers[wid] = make_f32(wshape, nw);
      g.initializers[bid] = make_f32({m}, nb);
      conv.inputs.resize(3);
      conv.inputs[1] = wid;
      conv.inputs[2] = bid;
      conv.outputs[0] = bn.outputs[0];
      producer[bn.outputs[0]] = pi;
      drop[i] = true;
    }
    remove_nodes(g, drop, readers);
  }

  // Removes the nodes marked in `drop`, then Constant nodes and initializers that only they read
  // (`readers`: each value's reader count before the removal).
  static void remove_nodes(Graph& g, std::vector<bool>& drop, const std::vector<int>& readers) {
    if (std::find(drop.begin(), drop.end(), true) == drop.end()) return;
    // Constant nodes whose only readers were removed go too.
    std::vector<int> left(g.names.size(), 0);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (drop[i]) continue;
      for (int id : g.nodes[i].inputs)
        if (id >= 0) left[id]++;
      for (int id : g.nodes[i].captures) left[id]++;
    }
    for (int id : g.outputs) left[id]++;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (n.op == "Constant" && n.outputs.size() == 1 && n.outputs[0] >= 0 &&
          n.outputs[0] < static_cast<int>(readers.size()) && readers[n.outputs[0]] > 0 &&
          left[n.outputs[0]] == 0)
        drop[i] = true;
    }
    std::vector<Node> kept;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (!drop[i]) kept.push_back(std::move(g.nodes[i]));
    g.nodes = std::move(kept);
    // The unfolded weights and statistics nobody reads any more are not kept.
    std::vector<int> still(g.names.size(), 0);
    for (const auto& n : g.nodes) {
      for (int id : n.inputs)
        if (id >= 0) still[id]++;
      for (int id : n.captures) still[id]++;
    }
    for (int id : g.outputs) still[id]++;
    for (auto it = g.initializers.begin(); it != g.initializers.end();) {
      if (still[it->first] == 0 && it->first < static_cast<int>(readers.size()) &&
          readers[it->first] > 0) {
        it = g.initializers.erase(it);
      } else {
        ++it;
      }
    }
  }

  int define(Graph& g, const std::string& name) {
    int id = static_cast<int>(g.names.size());
    g.names.push_back(name);
    g.ids[name] = id;
    return id;
  }

  Result<Attr> attribute(const ::onnx::AttributeProto& a, Graph& g, const std::string& node) {
    Attr out;
    using AP = ::onnx::AttributeProto;
    int type = a.type();
    if (type == AP::UNDEFINED) {  // old models omit the type
      if (a.has_g())
        type = AP::GRAPH;
      else if (a.has_t())
        type = AP::TENSOR;
      else if (a.has_s())
        type = AP::STRING;
      else if (a.has_f())
        type = AP::FLOAT;
      else if (a.ints_size())
        type = AP::INTS;
      else if (a.floats_size())
        type = AP::FLOATS;
      else
        type = AP::INT;
    }
    switch (type) {
      case AP::FLOAT:
        out.kind = Attr::kFloat;
        out.f = a.f();
        break;
      case AP::INT:
        out.kind = Attr::kInt;
        out.i = a.i();
        break;
      case AP::STRING:
        out.kind = Attr::kString;
        out.s = a.s();
        break;
      case AP::TENSOR: {
        out.kind = Attr::kTensor;
        POWER_ASSIGN_OR_RETURN(out.t, tensor_from_proto(a.t()));
        break;
      }
      case AP::GRAPH: {
        out.kind = Attr::kGraph;
        if (depth >= 8)
          return make_error(StatusCode::kUnsupported, "subgraphs nested deeper than 8");
        auto sub = std::make_shared<Graph>();
        sub->parent = &g;
        ++depth;
        Status st = load_graph(a.g(), *sub);
        --depth;
        POWER_RETURN_IF_ERROR(st);
        out.g = sub;
        break;
      }
      case AP::FLOATS:
        out.kind = Attr::kFloats;
        out.floats.assign(a.floats().begin(), a.floats().end());
        break;
      case AP::INTS:
        out.kind = Attr::kInts;
        out.ints.assign(a.ints().begin(), a.ints().end());
        break;
      case AP::STRINGS:
        out.kind = Attr::kStrings;
        out.strings.assign(a.strings().begin(), a.strings().end());
        break;
      default:
        return make_error(StatusCode::kUnsupported, "attribute '{}' of {} has unsupported type {}",
                          a.name(), node, type);
    }
    return out;
  }

  Status load_graph(const ::onnx::GraphProto& gp, Graph& g) {
    g.name = gp.name();
    std::unordered_set<std::string> init_names;
    for (const auto& t : gp.initializer()) {
      if (t.name().empty())
        return make_error(StatusCode::kInvalidArgument, "initializer without a name");
      POWER_ASSIGN_OR_RETURN(Tensor tensor, tensor_from_proto(t));
      int id = g.ids.count(t.name()) ? g.ids[t.name()] : define(g, t.name());
      g.initializers[id] = std::move(tensor);
      init_names.insert(t.name());
    }
    for (const auto& in : gp.input()) {
      if (init_names.count(in.name())) continue;  // an initializer with a default
      if (g.ids.count(in.name())) {
        return make_error(StatusCode::kInvalidArgument, "graph input '{}' declared twice",
                          in.name());
      }
      ValueInfo vi = value_info(in);
      if (vi.elem_type != 0 && !dtype_supported(vi.elem_type)) {
        return make_error(StatusCode::kUnsupported,
                          "graph input '{}' has unsupported element type {}", in.name(),
                          vi.elem_type);
      }
      g.inputs.push_back(define(g, in.name()));
      g.input_info.push_back(std::move(vi));
    }
    for (const auto& np : gp.node()) {
      Node n;
      n.op = np.op_type();
      n.name = np.name();
      n.opset = static_cast<int>(opset);
      if (!np.domain().empty() && np.domain() != "ai.onnx") {
        return make_error(
            StatusCode::kUnsupported,
            "{} uses operator domain '{}' (only the default ONNX domain is supported)", n.label(),
            np.domain());
      }
      const OpDef* def = find_op(n.op);
      n.def = def;
      if (!def && n.op != "If") {
        return make_error(StatusCode::kUnsupported, "unsupported operator {} (node '{}')", n.op,
                          n.name);
      }
      for (const auto& in : np.input()) {
        if (in.empty()) {
          n.inputs.push_back(-1);
          continue;
        }
        int id = resolve(g, in);
        if (id < 0) {
          return make_error(StatusCode::kInvalidArgument,
                            "{} reads '{}', which no earlier node, input or initializer defines "
                            "(graph not topologically sorted or malformed)",
                            n.label(), in);
        }
        n.inputs.push_back(id);
      }
      for (const auto& a : np.attribute()) {
        POWER_ASSIGN_OR_RETURN(Attr attr, attribute(a, g, n.label()));
        if (attr.g) {
          for (auto [local, outer] : attr.g->outer_refs) {
            (void)local;
            if (std::find(n.captures.begin(), n.captures.end(), outer) == n.captures.end())
              n.captures.push_back(outer);
          }
        }
        n.attrs[a.name()] = std::move(attr);
      }
      if (n.op == "If") {
        if (n.inputs.size() != 1 || n.inputs[0] < 0) {
          return make_error(StatusCode::kInvalidArgument, "{} needs one condition input",
                            n.label());
        }
        auto t = n.attrs.find("then_branch"), e = n.attrs.find("else_branch");
        if (t == n.attrs.end() || e == n.attrs.end() || !t->second.g || !e->second.g) {
          return make_error(StatusCode::kInvalidArgument,
                            "{} needs then_branch and else_branch graphs", n.label());
        }
        if (t->second.g->outputs.size() != static_cast<size_t>(np.output_size()) ||
            e->second.g->outputs.size() != static_cast<size_t>(np.output_size())) {
          return make_error(StatusCode::kInvalidArgument,
                            "{}: branch output counts differ from the node's", n.label());
        }
      }
      for (const auto& out : np.output()) {
        if (out.empty()) {
          n.outputs.push_back(-1);
          continue;
        }
        if (g.ids.count(out)) {
          return make_error(StatusCode::kInvalidArgument, "{} redefines value '{}'", n.label(),
                            out);
        }
        n.outputs.push_back(define(g, out));
      }
      if (n.outputs.empty()) {
        return make_error(StatusCode::kInvalidArgument, "{} has no outputs", n.label());
      }
      if (def && def->check) POWER_RETURN_IF_ERROR(def->check(n));
      g.nodes.push_back(std::move(n));
    }
    for (const auto& out : gp.output()) {
      int id = resolve(g, out.name());
      if (id < 0) {
        return make_error(StatusCode::kInvalidArgument, "graph output '{}' is never produced",
                          out.name());
      }
      g.outputs.push_back(id);
      g.output_info.push_back(value_info(out));
    }
    fold_constants(g);
    fold_batch_norms(g);
    if (fuse) fuse_epilogues(g);
    // Liveness: the last node index that reads each value.
    g.last_use.assign(g.names.size(), -1);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (int id : g.nodes[i].inputs)
        if (id >= 0) g.last_use[id] = static_cast<int>(i);
    }
    // Captured values are read by the node that owns the subgraph: map the subgraph's outer ids.
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (int id : g.nodes[i].captures)
        g.last_use[id] = std::max(g.last_use[id], static_cast<int>(i));
    for (int id : g.outputs) g.last_use[id] = static_cast<int>(g.nodes.size());
    return Status();
  }
};

// LoadOptions::batch_inputs, on the parsed graph before it is loaded. Returns how many
// Reshape shapes were rewritten.
Result<int> free_leading_dim(::onnx::GraphProto& gp) {
  std::unordered_map<std::string, const ::onnx::TensorProto*> constant_tensors;
  std::unordered_set<std::string> constant;  // values computed from constants only
  for (const auto& t : gp.initializer()) {
    constant_tensors[t.name()] = &t;
    constant.insert(t.name());
  }
  auto make_batch = [](::onnx::ValueInfoProto& v, bool must) -> Status {
    if (!v.type().has_tensor_type()) {  // a sequence or map: nothing to stack along
      if (!must) return Status();
      return make_error(StatusCode::kUnsupported, "graph input '{}' is not a tensor", v.name());
    }
    auto* tt = v.mutable_type()->mutable_tensor_type();
    if (!tt->has_shape() || tt->shape().dim_size() == 0) {
      if (!must) return Status();
      return make_error(StatusCode::kUnsupported,
                        "graph input '{}' has no leading dimension to stack a batch along",
                        v.name());
    }
    auto* d0 = tt->mutable_shape()->mutable_dim(0);
    if (d0->has_dim_value() && d0->dim_value() != 1) {
      if (!must) return Status();
      return make_error(StatusCode::kUnsupported,
                        "graph input '{}' fixes its leading dimension at {}", v.name(),
                        d0->dim_value());
    }
    d0->set_dim_param("batch");
    return Status();
  };
  for (auto& in : *gp.mutable_input()) {
    if (!constant.count(in.name())) POWER_RETURN_IF_ERROR(make_batch(in, true));
  }
  for (auto& out : *gp.mutable_output()) POWER_RETURN_IF_ERROR(make_batch(out, false));
  gp.clear_value_info();  // per-value shapes recorded for batch 1
  std::vector<::onnx::TensorProto> added;
  std::unordered_set<std::string> names;
  for (const auto& t : gp.initializer()) names.insert(t.name());
  for (const auto& np : gp.node())
    for (const auto& o : np.output()) names.insert(o);
  for (auto& np : *gp.mutable_node()) {
    bool is_constant = np.op_type() == "Constant";
    if (!is_constant && np.input_size() > 0) {
      is_constant = true;
      for (const auto& in : np.input())
        if (!in.empty() && !constant.count(in)) is_constant = false;
      for (const auto& a : np.attribute())
        if (a.has_g() || a.graphs_size() > 0) is_constant = false;
    }
    if (is_constant) {
      for (const auto& o : np.output()) constant.insert(o);
      if (np.op_type() == "Constant" && np.output_size() == 1) {
        for (const auto& a : np.attribute())
          if (a.name() == "value" && a.has_t()) constant_tensors[np.output(0)] = &a.t();
      }
      continue;
    }
    if (np.op_type() != "Reshape" || np.input_size() < 2) continue;
    bool allowzero = false;
    for (const auto& a : np.attribute())
      if (a.name() == "allowzero" && a.i() != 0) allowzero = true;
    auto it = constant_tensors.find(np.input(1));
    if (allowzero || it == constant_tensors.end()) continue;
    POWER_ASSIGN_OR_RETURN(Tensor shape, tensor_from_proto(*it->second));
    if (shape.dtype != DType::kI64 || shape.rank() != 1 || shape.numel() == 0 ||
        shape.data<int64_t>()[0] != 1) {
      continue;
    }
    ::onnx::TensorProto t;
    std::string name = np.input(1) + "/batch";
    while (names.count(name)) name += "_";
    names.insert(name);
    t.set_name(name);
    t.set_data_type(::onnx::TensorProto::INT64);
    t.add_dims(shape.numel());
    t.add_int64_data(0);  // Reshape's 0: copy the input's dimension
    for (int64_t i = 1; i < shape.numel(); ++i) t.add_int64_data(shape.data<int64_t>()[i]);
    np.set_input(1, name);
    added.push_back(std::move(t));
  }
  const int rewritten = static_cast<int>(added.size());
  for (auto& t : added) *gp.add_initializer() = std::move(t);
  return rewritten;
}

bool is_view_op(const std::string& op) {
  const OpDef* d = find_op(op);
  return d && d->view;
}

}  // namespace

Result<std::shared_ptr<const Model>> Model::load_file(const std::string& path,
                                                      const LoadOptions& options) {
  auto bytes = read_file(path);
  if (!bytes.ok()) return std::move(bytes).take_status();
  return load_bytes(bytes->data(), bytes->size(), options);
}

Result<std::shared_ptr<const Model>> Model::load_bytes(const void* data, size_t size,
                                                       const LoadOptions& options) {
  if (size > (size_t{2} << 30) - 1) {
    return make_error(StatusCode::kUnsupported,
                      "ONNX file of {} bytes exceeds protobuf's 2 GiB limit", size);
  }
  ::onnx::ModelProto mp;
  if (!mp.ParseFromArray(data, static_cast<int>(size))) {
    return make_error(StatusCode::kCorrupt, "not a valid ONNX model (protobuf parse failed)");
  }
  if (!mp.has_graph()) return make_error(StatusCode::kCorrupt, "ONNX model has no graph");
  std::shared_ptr<Model> m(new Model());
  m->ir_version_ = mp.ir_version();
  m->producer_ = mp.producer_name();
  for (const auto& o : mp.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") m->opset_ = o.version();
  }
  if (m->opset_ == 0) {
    return make_error(StatusCode::kUnsupported, "model imports no default-domain opset");
  }
  if (options.batch_inputs) {
    POWER_ASSIGN_OR_RETURN(m->batch_reshapes_, free_leading_dim(*mp.mutable_graph()));
  }
  Loader loader;
  loader.opset = m->opset_;
  loader.fuse = options.fuse_elementwise;
  loader.fold = options.fold_constants;
  // Folded constants may take at most the model's own weight bytes again, plus 64 MiB.
  loader.fold_budget = static_cast<int64_t>(size) + (int64_t{64} << 20);
  m->graph_ = std::make_shared<Graph>();
  POWER_RETURN_IF_ERROR(loader.load_graph(mp.graph(), *m->graph_));
  // Keep a weight-free copy for shape inference: small initializers (shape constants) stay.
  for (auto& t : *mp.mutable_graph()->mutable_initializer()) {
    int64_t n = 1;
    for (auto d : t.dims()) n *= d;
    if (n > 64) {
      t.clear_raw_data();
      t.clear_float_data();
      t.clear_double_data();
      t.clear_int32_data();
      t.clear_int64_data();
    }
  }
  m->shape_model_ = mp.SerializeAsString();
  return std::shared_ptr<const Model>(std::move(m));
}

int64_t Model::weight_bytes() const {
  int64_t total = 0;
  std::function<void(const Graph&)> walk = [&](const Graph& g) {
    for (const auto& [id, t] : g.initializers) total += static_cast<int64_t>(t.nbytes());
    for (const auto& n : g.nodes)
      for (const auto& [k, a] : n.attrs) {
        if (a.kind == Attr::kTensor) total += static_cast<int64_t>(a.t.nbytes());
        if (a.g) walk(*a.g);
      }
  };
  walk(*graph_);
  return total;
}

std::map<std::string, int> Model::op_counts() const {
  std::map<std::string, int> counts;
  std::function<void(const Graph&)> walk = [&](const Graph& g) {
    for (const auto& n : g.nodes) {
      counts[n.op]++;
      for (const auto& [k, a] : n.attrs)
        if (a.g) walk(*a.g);
    }
  };
  walk(*graph_);
  return counts;
}

int Model::folded_nodes() const {
  int total = 0;
  std::function<void(const Graph&)> walk = [&](const Graph& g) {
    total += g.folded_nodes;
    for (const auto& n : g.nodes)
      for (const auto& [k, a] : n.attrs)
        if (a.g) walk(*a.g);
  };
  walk(*graph_);
  return total;
}

std::map<std::string, int> Model::fused_counts() const {
  std::map<std::string, int> counts;
  std::function<void(const Graph&)> walk = [&](const Graph& g) {
    for (const auto& n : g.nodes) {
      for (const auto& op : n.fused_ops) counts[op]++;
      for (const auto& [k, a] : n.attrs)
        if (a.g) walk(*a.g);
    }
  };
  walk(*graph_);
  return counts;
}

Result<MemoryPlan> Model::plan_memory(const std::vector<Shape>& input_shapes) const {
  const Graph& g = *graph_;
  if (input_shapes.size() != g.inputs.size()) {
    return make_error(StatusCode::kInvalidArgument, "model has {} inputs, {} shapes given",
                      g.inputs.size(), input_shapes.size());
  }
  ::onnx::ModelProto mp;
  if (!mp.ParseFromString(shape_model_)) return make_error(StatusCode::kInternal, "shape model");
  // Fix the runtime inputs' shapes.
  auto* gp = mp.mutable_graph();
  size_t k = 0;
  std::unordered_set<std::string> init;
  for (const auto& t : gp->initializer()) init.insert(t.name());
  for (auto& in : *gp->mutable_input()) {
    if (init.count(in.name())) continue;
    auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (int64_t d : input_shapes[k]) shape->add_dim()->set_dim_value(d);
    ++k;
  }
  gp->clear_value_info();
  ::onnx::ShapeInferenceOptions opts;
  opts.check_type = false;
  opts.error_mode = 0;
  opts.enable_data_propagation = true;
  try {
    ::onnx::shape_inference::InferShapes(mp, ::onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception& e) {
    return make_error(StatusCode::kInvalidArgument, "shape inference failed: {}", e.what());
  }
  std::unordered_map<std::string, int64_t> bytes;  // -1 unknown
  auto record = [&](const ::onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return;
    const auto& tt = v.type().tensor_type();
    if (!dtype_supported(tt.elem_type())) return;
    int64_t n = 1;
    for (const auto& d : tt.shape().dim()) {
      if (!d.has_dim_value() || d.dim_value() < 0) return;
      n *= d.dim_value();
    }
    bytes[v.name()] = n * static_cast<int64_t>(dtype_size(static_cast<DType>(tt.elem_type())));
  };
  for (const auto& v : gp->value_info()) record(v);
  for (const auto& v : gp->output()) record(v);

  MemoryPlan plan;
  plan.weight_bytes = weight_bytes();
  // Simulate the interpreter: every non-view output is a new buffer; a view shares its input's
  // buffer; a buffer is released when the last value referencing it is dead.
  std::vector<int> buffer_of(g.names.size(), -1);
  std::vector<int64_t> buffer_bytes;
  std::vector<int> buffer_refs;
  int64_t live = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    bool view = is_view_op(n.op);
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      int id = n.outputs[o];
      if (id < 0) continue;
      if (view && o == 0 && n.inputs[0] >= 0 && buffer_of[n.inputs[0]] >= 0) {
        buffer_of[id] = buffer_of[n.inputs[0]];
        buffer_refs[buffer_of[id]]++;
        continue;
      }
      if (view && o == 0) continue;      // a view of an input or initializer: not counted
      if (g.last_use[id] < 0) continue;  // dropped right away
      auto it = bytes.find(g.names[id]);
      int64_t b = 0;
      if (it == bytes.end()) {
        plan.unknown_values++;
      } else {
        b = it->second;
      }
      buffer_of[id] = static_cast<int>(buffer_bytes.size());
      buffer_bytes.push_back(b);
      buffer_refs.push_back(1);
      live += b;
    }
    plan.peak_bytes = std::max(plan.peak_bytes, live);
    // Free values whose last use is this node.
    std::vector<int> dead;
    for (int id : n.inputs)
      if (id >= 0 && g.last_use[id] == static_cast<int>(i)) dead.push_back(id);
    for (int id : n.captures)
      if (g.last_use[id] == static_cast<int>(i)) dead.push_back(id);
    for (int id : n.outputs)
      if (id >= 0 && g.last_use[id] < 0) dead.push_back(id);
    std::sort(dead.begin(), dead.end());
    dead.erase(std::unique(dead.begin(), dead.end()), dead.end());
    for (int id : dead) {
      int b = buffer_of[id];
      if (b < 0) continue;
      buffer_of[id] = -1;
      if (--buffer_refs[b] == 0) live -= buffer_bytes[b];
    }
  }
  return plan;
}

namespace {

struct Exec {
  ThreadPool* pool;
  RunStats* stats;
  std::unordered_map<const void*, int> refs;  // kernel-produced buffers -> live values
  int64_t live = 0;
  int64_t peak = 0;

  void retain(const Tensor& t, bool owned) {
    if (!owned || !t.buf) return;
    if (refs[t.buf.get()]++ == 0) {
      live += static_cast<int64_t>(t.nbytes());
      peak = std::max(peak, live);
    }
  }
  void release(const Tensor& t) {
    if (!t.buf) return;
    auto it = refs.find(t.buf.get());
    if (it == refs.end()) return;
    if (--it->second == 0) {
      live -= static_cast<int64_t>(t.nbytes());
      refs.erase(it);
    }
  }

  Status run_graph(const Graph& g, std::vector<Tensor>& vals) {
    for (const auto& [id, t] : g.initializers) vals[id] = t;
    OpContext ctx{pool};
    std::vector<const Tensor*> in;
    std::vector<Tensor> out;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      in.clear();
      for (int id : n.inputs) {
        if (id < 0) {
          in.push_back(nullptr);
          continue;
        }
        if (!vals[id].buf) {
          return make_error(StatusCode::kInternal, "{}: input '{}' has no value", n.label(),
                            g.names[id]);
        }
        in.push_back(&vals[id]);
      }
      // Kernels write out[0] (and LSTM out[1..2]) unconditionally: never fewer than 3 slots.
      out.assign(std::max<size_t>(n.outputs.size(), 3), Tensor{});
      Status st;
      const OpDef* def = n.def;
      st = def ? def->run(n, in, out, ctx) : run_if(g, n, vals, out);
      if (!st.ok()) return std::move(st).with("node", n.name.empty() ? n.op : n.name);
      if (stats) stats->nodes_run++;
      bool view = def && def->view;
      for (size_t o = 0; o < n.outputs.size(); ++o) {
        int id = n.outputs[o];
        if (id < 0) continue;
        if (!out[o].buf) {
          return make_error(StatusCode::kInternal, "{} produced no output {}", n.label(), o);
        }
        // A view shares a buffer; it is counted only if that buffer is already tracked.
        bool owned = !(view && o == 0) || refs.count(out[o].buf.get());
        retain(out[o], owned);
        vals[id] = std::move(out[o]);
      }
      for (int id : n.inputs)
        if (id >= 0 && g.last_use[id] == static_cast<int>(i) && vals[id].buf) {
          release(vals[id]);
          vals[id] = Tensor{};
        }
      for (int id : n.captures)
        if (g.last_use[id] == static_cast<int>(i) && vals[id].buf) {
          release(vals[id]);
          vals[id] = Tensor{};
        }
      for (int id : n.outputs)
        if (id >= 0 && g.last_use[id] < 0 && vals[id].buf) {
          release(vals[id]);
          vals[id] = Tensor{};
        }
    }
    return Status();
  }

  Status run_if(const Graph& g, const Node& n, std::vector<Tensor>& vals,
                std::vector<Tensor>& out) {
    const Tensor& c = vals[n.inputs[0]];
    if (c.numel() != 1) {
      return make_error(StatusCode::kInvalidArgument, "{}: condition has {} elements", n.label(),
                        c.numel());
    }
    auto cv = to_f64_vector(c);
    bool cond = cv.ok() && (*cv)[0] != 0;
    const Graph& sub = *n.attrs.at(cond ? "then_branch" : "else_branch").g;
    std::vector<Tensor> sv(sub.names.size());
    for (auto [local, outer] : sub.outer_refs) sv[local] = vals[outer];
    // Values the branch reads from the enclosing graph are owned there: the branch only
    // tracks what it produces.
    Exec inner{pool, nullptr, {}, 0, 0};
    POWER_RETURN_IF_ERROR(inner.run_graph(sub, sv));
    peak = std::max(peak, live + inner.peak);
    for (size_t o = 0; o < sub.outputs.size(); ++o) {
      out[o] = sv[sub.outputs[o]];
      if (!out[o].buf)
        return make_error(StatusCode::kInternal, "{}: branch output missing", n.label());
      // A branch output that is a captured outer value must not alias its bookkeeping.
      if (refs.count(out[o].buf.get())) {
        Tensor copy = out[o];
        copy.buf = std::make_shared<Bytes>(*out[o].buf);
        out[o] = std::move(copy);
      }
    }
    return Status();
  }
};

}  // namespace

Result<std::vector<Tensor>> Model::run(const std::vector<Tensor>& inputs, ThreadPool* pool,
                                       RunStats* stats) const {
  const Graph& g = *graph_;
  if (inputs.size() != g.inputs.size()) {
    return make_error(StatusCode::kInvalidArgument, "model has {} inputs, {} given",
                      g.inputs.size(), inputs.size());
  }
  std::vector<Tensor> vals(g.names.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ValueInfo& vi = g.input_info[i];
    const Tensor& t = inputs[i];
    if (!t.buf || t.numel() < 0 ||
        t.nbytes() != static_cast<size_t>(t.numel()) * dtype_size(t.dtype)) {
      return make_error(StatusCode::kInvalidArgument, "input '{}' is not a valid tensor", vi.name);
    }
    if (vi.elem_type != 0 && vi.elem_type != static_cast<int32_t>(t.dtype)) {
      return make_error(StatusCode::kInvalidArgument, "input '{}' must be {}, got {}", vi.name,
                        dtype_name(static_cast<DType>(vi.elem_type)), dtype_name(t.dtype));
    }
    if (vi.has_shape) {
      bool ok = vi.dims.size() == t.shape.size();
      for (size_t d = 0; ok && d < vi.dims.size(); ++d)
        if (vi.dims[d] >= 0 && vi.dims[d] != t.shape[d]) ok = false;
      if (!ok) {
        return make_error(StatusCode::kInvalidArgument, "input '{}' must have shape {}, got {}",
                          vi.name, shape_str(vi.dims), shape_str(t.shape));
      }
    }
    vals[g.inputs[i]] = t;
  }
  BufferScope scope(buffers_.get());
  Exec exec{pool, stats, {}, 0, 0};
  POWER_RETURN_IF_ERROR(exec.run_graph(g, vals));
  std::vector<Tensor> outs;
  for (int id : g.outputs) {
    if (!vals[id].buf) return make_error(StatusCode::kInternal, "output '{}' missing", g.names[id]);
    outs.push_back(vals[id]);
  }
  if (stats) stats->peak_bytes = exec.peak;
  return outs;
}

Result<Tensor> parse_tensor_proto(const void* data, size_t size, std::string* name) {
  if (size > static_cast<size_t>(INT32_MAX))
    return make_error(StatusCode::kUnsupported, "tensor file too large");
  ::onnx::TensorProto tp;
  if (!tp.ParseFromArray(data, static_cast<int>(size))) {
    return make_error(StatusCode::kCorrupt, "not a valid ONNX TensorProto");
  }
  if (name) *name = tp.name();
  return tensor_from_proto(tp);
}

std::vector<std::string> supported_operators() {
  std::vector<std::string> out;
  for (const auto& d : all_ops()) out.push_back(d.name);
  out.push_back("If");
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace power::onnx
