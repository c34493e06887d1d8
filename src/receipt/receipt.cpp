// power.receipt.v1: building the parts, signing, and every check of `power verify`.
#include "receipt/receipt.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "base/cpu.h"
#include "base/machine.h"
#include "base/sha256.h"
#include "format/ggml_types.h"
#include "receipt/canonical_json.h"

namespace power::receipt {
namespace {

// A float parameter as the exact double value of its binary32 (round-trips exactly).
double exact(float f) {
  return static_cast<double>(f);
}

uint64_t mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb * 1024;
  }
  return 0;
}

// One chat message in canonical input form: role and content, plus the tool-use members
// when set (tool_calls as the JSON value its text holds).
nlohmann::json message_json(const ChatMessage& m) {
  nlohmann::json j = {{"role", m.role}, {"content", m.content}};
  if (!m.name.empty()) j["name"] = m.name;
  if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
  if (!m.tool_calls_json.empty()) {
    auto calls = nlohmann::json::parse(m.tool_calls_json, nullptr, false);
    j["tool_calls"] = calls.is_discarded() ? nlohmann::json(m.tool_calls_json) : calls;
  }
  return j;
}

std::string canonical_or_empty(const nlohmann::json& j) {
  auto c = canonical_json(j);
  return c.ok() ? *c : std::string();
}

}  // namespace

nlohmann::json model_json(const GgufFile& file, const std::string& path,
                          const std::string& artifact_sha256, const std::string& arch,
                          const TensorManifest& tensors) {
  std::vector<const TensorDigest*> sorted;
  for (const TensorDigest& t : tensors.tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorDigest* a, const TensorDigest* b) { return a->name < b->name; });
  nlohmann::json ids = nlohmann::json::array();
  for (const TensorDigest* t : sorted) {
    ids.push_back({{"name", t->name},
                   {"type", std::string(ggml_type_name(t->type))},
                   {"shape", t->ne},
                   {"sha256", t->sha256}});
  }
  std::string name;
  if (auto n = file.get_string("general.name"); n.ok() && !n->empty()) {
    name = *n;
  } else {
    name =
        path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  }
  nlohmann::json m;
  m["name"] = name;
  m["sha256"] = artifact_sha256;
  m["format"] = "gguf";
  m["format_version"] = file.version();
  m["arch"] = arch;
  m["n_tensors"] = sorted.size();
  m["tensors_sha256"] = sha256_hex(canonical_or_empty(ids));
  return m;
}

nlohmann::json device_json() {
  static const nlohmann::json device = [] {
    const CpuFeatures& f = cpu_features();
    nlohmann::json d;
    d["kind"] = "cpu";
    d["cpu_model"] = f.model;
    d["isa_flags"] = f.flags_string();
    d["logical_cores"] = f.logical_cores;
    d["memory_bytes"] = mem_total_bytes();
    d["gpu"] = nullptr;               // CPU build: no accelerator
    d["hardware"] = machine_facts();  // base/machine.h: CPU identity, caches, NUMA, kernel, ...
    return d;
  }();
  return device;
}

std::string token_ids_sha256(std::span<const int32_t> ids) {
  Sha256 h;
  for (int32_t id : ids) {
    const auto u = static_cast<uint32_t>(id);
    const uint8_t le[4] = {static_cast<uint8_t>(u), static_cast<uint8_t>(u >> 8),
                           static_cast<uint8_t>(u >> 16), static_cast<uint8_t>(u >> 24)};
    h.update(le, 4);
  }
  return to_hex(h.finish());
}

nlohmann::json input_json(const GenerateRequest& req) {
  nlohmann::json in;
  if (!req.messages.empty()) {
    nlohmann::json msgs = nlohmann::json::array();
    for (const ChatMessage& m : req.messages) msgs.push_back(message_json(m));
    in["kind"] = "messages";
    in["sha256"] = sha256_hex(canonical_or_empty(msgs));
  } else if (!req.prompt_tokens.empty()) {
    in["kind"] = "prompt_tokens";
    in["sha256"] = sha256_hex(canonical_or_empty(nlohmann::json(req.prompt_tokens)));
  } else {
    in["kind"] = "prompt";
    in["sha256"] = sha256_hex(req.prompt);
  }
  return in;
}

nlohmann::json request_config_json(const GenerateRequest& req) {
  const SamplingOptions& s = req.sampling;
  nlohmann::json bias = nlohmann::json::array();
  for (const auto& [id, b] : s.logit_bias) bias.push_back({id, exact(b)});
  nlohmann::json sampling = {{"temperature", exact(s.temperature)},
                             {"top_k", s.top_k},
                             {"top_p", exact(s.top_p)},
                             {"min_p", exact(s.min_p)},
                             {"repeat_penalty", exact(s.repeat_penalty)},
                             {"frequency_penalty", exact(s.frequency_penalty)},
                             {"presence_penalty", exact(s.presence_penalty)},
                             {"penalty_last_n", s.penalty_last_n},
                             {"logit_bias", bias},
                             {"seed", std::to_string(s.seed)},
                             {"mode", s.temperature <= 0 ? "greedy" : "seeded"}};
  nlohmann::json c;
  c["sampling"] = sampling;
  c["max_tokens"] = req.max_tokens;
  c["max_tokens_up_to_context"] = req.max_tokens_up_to_context;
  c["stop"] = req.stop;
  c["ignore_eos"] = req.ignore_eos;
  c["add_bos"] = req.add_bos;
  // Structured output and tools constrain what may be sampled: bound by digest.
  const char* format = req.response_format.type == ResponseFormat::Type::kJsonObject ? "json_object"
                       : req.response_format.type == ResponseFormat::Type::kJsonSchema
                           ? "json_schema"
                           : "text";
  c["response_format"] = {
      {"type", format},
      {"schema_sha256", req.response_format.schema_json.empty()
                            ? nlohmann::json(nullptr)
                            : nlohmann::json(sha256_hex(req.response_format.schema_json))}};
  c["tools_sha256"] =
      req.tools_json.empty() ? nlohmann::json(nullptr) : nlohmann::json(sha256_hex(req.tools_json));
  c["tool_choice"] = req.tool_choice_json;
  c["top_logprobs"] = req.top_logprobs;
  return c;
}

Status request_config_from_json(const nlohmann::json& c, GenerateRequest& req) {
  try {
    const nlohmann::json& s = c.at("sampling");
    SamplingOptions& o = req.sampling;
    o.temperature = static_cast<float>(s.at("temperature").get<double>());
    o.top_k = s.at("top_k").get<int32_t>();
    o.top_p = static_cast<float>(s.at("top_p").get<double>());
    o.min_p = static_cast<float>(s.at("min_p").get<double>());
    o.repeat_penalty = static_cast<float>(s.at("repeat_penalty").get<double>());
    o.frequency_penalty = static_cast<float>(s.at("frequency_penalty").get<double>());
    o.presence_penalty = static_cast<float>(s.at("presence_penalty").get<double>());
    o.penalty_last_n = s.at("penalty_last_n").get<int32_t>();
    o.logit_bias.clear();
    for (const auto& b : s.at("logit_bias")) {
      o.logit_bias.emplace_back(b.at(0).get<int32_t>(), static_cast<float>(b.at(1).get<double>()));
    }
    const std::string seed = s.at("seed").get<std::string>();
    size_t used = 0;
    o.seed = std::stoull(seed, &used);
    if (used != seed.size()) throw std::invalid_argument("seed");
    req.max_tokens = c.at("max_tokens").get<int32_t>();
    req.max_tokens_up_to_context = c.at("max_tokens_up_to_context").get<bool>();
    req.stop = c.at("stop").get<std::vector<std::string>>();
    req.ignore_eos = c.at("ignore_eos").get<bool>();
    req.add_bos = c.at("add_bos").get<bool>();
    req.top_logprobs = c.at("top_logprobs").get<int32_t>();
    req.tool_choice_json = c.at("tool_choice").get<std::string>();
    if (c.at("response_format").at("type") != "text" || !c.at("tools_sha256").is_null()) {
      return Status(StatusCode::kUnsupported,
                    "the receipt binds a response format or tools by digest only; replaying "
                    "structured-output requests is not supported");
    }
    if (c.contains("speculative") && c["speculative"].value("enabled", false)) {
      const nlohmann::json& sp = c["speculative"];
      SpeculativeOptions so;
      so.mode = sp.at("mode").get<std::string>();
      so.k = sp.at("k").get<int>();
      so.adaptive = sp.at("adaptive").get<bool>();
      so.s = sp.value("s", 0);
      req.speculative = so;
    } else {
      req.speculative = SpeculativeOptions{};  // "off"
    }
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, "the receipt's config is malformed")
        .with("error", e.what());
  }
  return Status();
}

nlohmann::json output_json(const Completion& c) {
  nlohmann::json o;
  o["tokens_sha256"] = token_ids_sha256(c.tokens);
  o["text_sha256"] = sha256_hex(c.text);
  o["n_tokens"] = c.tokens.size();
  o["finish"] = std::string(finish_name(c.finish));
  if (c.speculative.mode != "off") {
    const SpeculativeUsage& u = c.speculative;
    o["speculative"] = {{"mode", u.mode},
                        {"drafted", u.drafted},
                        {"accepted", u.accepted},
                        {"verify_passes", u.verify_passes},
                        {"restores", u.restores},
                        {"replays", u.replays},
                        {"replayed_tokens", u.replayed_tokens}};
  }
  o["status"] = std::string(status_code_name(c.status.code()));
  return o;
}

nlohmann::json timings_json(const Timings& t) {
  return {{"queue_ms", t.queue_ms},
          {"time_to_first_token_ms", t.time_to_first_token_ms},
          {"prefill_ms", t.prefill_ms},
          {"decode_ms", t.decode_ms}};
}

Result<std::string> sign_receipt(nlohmann::json body, const SigningKey& key) {
  if (!body.is_object() || body.contains("signature")) {
    return Status(StatusCode::kInvalidArgument, "a receipt body is an object without a signature");
  }
  POWER_ASSIGN_OR_RETURN(std::string signed_bytes, canonical_json(body));
  POWER_ASSIGN_OR_RETURN(auto sig, key.sign(signed_bytes));
  body["signature"] = {{"alg", "Ed25519"},
                       {"public_key", key.public_key_hex()},
                       {"value", to_hex(sig.data(), sig.size())}};
  return canonical_json(body);
}

ExecutionFacts facts_from_receipt(const nlohmann::json& r) {
  ExecutionFacts f;
  auto str = [](const nlohmann::json& j, const char* a, const char* b) -> std::string {
    if (j.contains(a) && j[a].is_object() && j[a].contains(b) && j[a][b].is_string()) {
      return j[a][b].get<std::string>();
    }
    return {};
  };
  f.model_sha256 = str(r, "model", "sha256");
  f.power_version = str(r, "config", "power_version");
  f.device_kind = str(r, "device", "kind");
  f.kernel_isa = str(r, "config", "kernel_isa");
  f.signed_receipt = r.contains("signature");
  const nlohmann::json* c = r.contains("config") ? &r["config"] : nullptr;
  if (c == nullptr || !c->is_object() || !c->contains("nondeterminism") ||
      !(*c)["nondeterminism"].is_array()) {
    f.nondeterminism.push_back("the receipt does not state its determinism");
  } else {
    for (const auto& why : (*c)["nondeterminism"]) {
      f.nondeterminism.push_back(why.is_string() ? why.get<std::string>() : why.dump());
    }
  }
  return f;
}

Status request_input_from_json(std::string_view request_json, GenerateRequest& req) {
  auto parsed = parse_json_strict(request_json);
  if (!parsed.ok()) {
    return Status(StatusCode::kInvalidArgument, "the request file is not valid JSON")
        .with("error", parsed.status().message());
  }
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) {
    return Status(StatusCode::kInvalidArgument, "the request file must hold a JSON object");
  }
  const int forms = (j.contains("prompt") ? 1 : 0) + (j.contains("prompt_tokens") ? 1 : 0) +
                    (j.contains("messages") ? 1 : 0);
  if (forms != 1) {
    return Status(StatusCode::kInvalidArgument,
                  "the request needs exactly one of prompt, prompt_tokens, messages");
  }
  try {
    if (j.contains("prompt")) {
      req.prompt = j["prompt"].get<std::string>();
    } else if (j.contains("prompt_tokens")) {
      req.prompt_tokens = j["prompt_tokens"].get<std::vector<int32_t>>();
    } else {
      for (const auto& m : j["messages"]) {
        ChatMessage cm;
        cm.role = m.at("role").get<std::string>();
        if (m.contains("content") && !m["content"].is_null()) {
          cm.content = m["content"].get<std::string>();
        }
        if (m.contains("name")) cm.name = m["name"].get<std::string>();
        if (m.contains("tool_call_id")) cm.tool_call_id = m["tool_call_id"].get<std::string>();
        if (m.contains("tool_calls")) cm.tool_calls_json = m["tool_calls"].dump();
        req.messages.push_back(std::move(cm));
      }
    }
  } catch (const std::exception& e) {
    return Status(StatusCode::kInvalidArgument, "the request's input is malformed")
        .with("error", e.what());
  }
  return Status();
}

namespace {

void add(std::vector<VerifyCheck>& out, std::string name, bool ok, std::string detail) {
  out.push_back({std::move(name), ok, std::move(detail)});
}

bool is_onnx_receipt(const nlohmann::json& r) {
  return r.is_object() && r.contains("model") && r["model"].is_object() &&
         r["model"].contains("format") && r["model"]["format"] == "onnx";
}

// Schema: the members and kinds every v1 receipt has.
std::string schema_problem(const nlohmann::json& r) {
  if (!r.is_object()) return "not a JSON object";
  if (!r.contains("schema") || r["schema"] != kReceiptSchema) {
    return "schema is not " + std::string(kReceiptSchema);
  }
  // ONNX executions (src/onnx/service.h) bind files, task options and media digests instead
  // of tensors, sampling and tokens.
  static const std::vector<std::pair<const char*, std::vector<const char*>>> kOnnxRequired = {
      {"model", {"name", "sha256", "format", "task", "files"}},
      {"config", {"task", "threads", "kernel_isa", "power_version", "options", "nondeterminism"}},
      {"device", {"kind", "cpu_model", "isa_flags", "memory_bytes"}},
      {"input", {"kind", "sha256", "bytes"}},
      {"output", {"kind", "sha256"}},
      {"timings", {}},
      {"signature", {"alg", "public_key", "value"}},
  };
  static const std::vector<std::pair<const char*, std::vector<const char*>>> kRequired = {
      {"model", {"name", "sha256", "format", "tensors_sha256"}},
      {"config",
       {"sampling", "kv_type", "threads", "kernel_isa", "power_version", "speculative",
        "nondeterminism"}},
      {"device", {"kind", "cpu_model", "isa_flags", "memory_bytes"}},
      {"input", {"kind", "sha256", "tokens_sha256"}},
      {"output", {"tokens_sha256", "text_sha256", "n_tokens", "finish"}},
      {"timings", {}},
      {"signature", {"alg", "public_key", "value"}},
  };
  const bool onnx = is_onnx_receipt(r);
  for (const auto& [part, members] : onnx ? kOnnxRequired : kRequired) {
    if (!r.contains(part) || !r[part].is_object()) return std::string("missing object ") + part;
    for (const char* m : members) {
      if (!r[part].contains(m)) return std::string("missing ") + part + "." + m;
    }
  }
  for (const char* h : {"sha256", "tokens_sha256", "text_sha256"}) {
    for (const char* part : {"model", "input", "output"}) {
      if (r[part].contains(h) &&
          (!r[part][h].is_string() || !parse_sha256_hex(r[part][h].get<std::string>()).ok())) {
        return std::string(part) + "." + h + " is not a SHA-256";
      }
    }
  }
  return {};
}

}  // namespace

std::vector<VerifyCheck> verify_receipt(std::string_view text, const VerifyOptions& o) {
  std::vector<VerifyCheck> out;
  auto parsed = parse_json_strict(text);
  if (!parsed.ok()) {
    add(out, "canonical", false, parsed.status().to_string());
    return out;
  }
  const nlohmann::json& r = *parsed;
  // The file must be its own canonical form (one trailing newline allowed): any other byte
  // form of the same value (an 'E' for an 'e', an escaped '/') is a different receipt.
  std::string_view body = text;
  if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
  auto canon = canonical_json(r);
  add(out, "canonical", canon.ok() && *canon == body,
      canon.ok() ? (*canon == body ? "the file is its canonical JSON"
                                   : "the bytes are not the canonical JSON of their value")
                 : canon.status().to_string());

  const std::string schema_err = schema_problem(r);
  add(out, "schema", schema_err.empty(),
      schema_err.empty() ? std::string(kReceiptSchema) : schema_err);
  if (!schema_err.empty()) return out;

  // Signature over the canonical form without the "signature" member.
  {
    const nlohmann::json& sig = r["signature"];
    std::string detail;
    bool ok = false;
    std::array<uint8_t, 64> value{};
    auto embedded = sig["public_key"].is_string()
                        ? parse_public_key_hex(sig["public_key"].get<std::string>())
                        : Result<PublicKey>(Status(StatusCode::kInvalidArgument, "not a string"));
    // Hex must be lowercase: the signature member is outside what is signed, so a second
    // spelling of the same bytes would be an unsigned change.
    if (sig["alg"] != "Ed25519") {
      detail = "alg is not Ed25519";
    } else if (!embedded.ok() || sig["public_key"] != to_hex(embedded->data(), embedded->size())) {
      detail = "signature.public_key is not 64 lowercase hex digits";
    } else if (!sig["value"].is_string() ||
               !decode_hex(sig["value"].get<std::string>(), value.data(), value.size()).ok() ||
               sig["value"] != to_hex(value.data(), value.size())) {
      detail = "signature.value is not 128 lowercase hex digits";
    } else if (!o.public_key) {
      detail = "no public key to check against (give --pubkey, or create the local key)";
    } else if (*o.public_key != *embedded) {
      detail = "signed by " + sig["public_key"].get<std::string>() + ", not by the given key " +
               to_hex(o.public_key->data(), o.public_key->size());
    } else {
      nlohmann::json unsigned_body = r;
      unsigned_body.erase("signature");
      auto msg = canonical_json(unsigned_body);
      Status st = msg.ok() ? verify_signature(*o.public_key, *msg, value) : msg.status();
      ok = st.ok();
      detail = ok ? "Ed25519 by " + sig["public_key"].get<std::string>() : st.message();
    }
    add(out, "signature", ok, detail);
  }

  if (o.model_sha256 && is_onnx_receipt(r)) {
    // Any of the execution's files (OCR: det, rec, keys) may be checked.
    std::string role;
    if (r["model"]["files"].is_array()) {
      for (const auto& f : r["model"]["files"]) {
        if (f.is_object() && f.contains("sha256") && f["sha256"] == *o.model_sha256) {
          role = f.contains("role") && f["role"].is_string() ? f["role"].get<std::string>() : "?";
        }
      }
    }
    add(out, "model", !role.empty(),
        !role.empty()
            ? "the file is the recorded " + role + " file"
            : "the file's sha256 " + *o.model_sha256 + " is none of the recorded model.files");
  } else if (o.model_sha256) {
    const bool ok = r["model"]["sha256"] == *o.model_sha256;
    add(out, "model", ok,
        ok ? "the model file is the recorded artifact"
           : "the model file's sha256 " + *o.model_sha256 + " is not the recorded " +
                 r["model"]["sha256"].dump());
  }
  if (o.request_json && is_onnx_receipt(r)) {
    // The exact input bytes (the WAV or image file that was sent).
    const std::string mine = sha256_hex(*o.request_json);
    const bool ok = r["input"]["sha256"] == mine;
    add(out, "input", ok,
        ok ? "the input file matches input.sha256"
           : "the input file (sha256 " + mine + ") does not match input.sha256 " +
                 r["input"]["sha256"].dump());
  } else if (o.request_json) {
    GenerateRequest req;
    Status st = request_input_from_json(*o.request_json, req);
    if (!st.ok()) {
      add(out, "input", false, st.to_string());
    } else {
      const nlohmann::json mine = input_json(req);
      const bool ok = mine["kind"] == r["input"]["kind"] && mine["sha256"] == r["input"]["sha256"];
      add(out, "input", ok,
          ok ? "the request's " + mine["kind"].get<std::string>() + " matches input.sha256"
             : "the request's " + mine["kind"].get<std::string>() + " (sha256 " +
                   mine["sha256"].get<std::string>() + ") does not match the receipt's " +
                   r["input"]["kind"].dump() + " " + r["input"]["sha256"].dump());
    }
  }
  if (o.output_text && is_onnx_receipt(r)) {
    // The JSON result, in any spelling: its canonical form is what was hashed.
    auto parsed_out = parse_json_strict(*o.output_text);
    auto canon_out =
        parsed_out.ok() ? canonical_json(*parsed_out) : Result<std::string>(parsed_out.status());
    const std::string mine = canon_out.ok() ? sha256_hex(*canon_out) : std::string();
    const bool ok = canon_out.ok() && r["output"]["sha256"] == mine;
    add(out, "output", ok,
        ok ? "the canonical JSON of the output matches output.sha256"
           : (canon_out.ok() ? "the output's canonical JSON (sha256 " + mine +
                                   ") does not match output.sha256 " + r["output"]["sha256"].dump()
                             : "the output file is not JSON: " + canon_out.status().message()));
  } else if (o.output_text) {
    const std::string mine = sha256_hex(*o.output_text);
    const bool ok = r["output"]["text_sha256"] == mine;
    add(out, "output", ok,
        ok ? "the output text matches output.text_sha256"
           : "the output text (sha256 " + mine + ") does not match output.text_sha256 " +
                 r["output"]["text_sha256"].dump());
  }
  if (o.policy) {
    Status st = check_policy(*o.policy, facts_from_receipt(r));
    add(out, "policy", st.ok(), st.ok() ? "every rule of the policy holds" : st.message());
  }
  return out;
}

}  // namespace power::receipt
