// Execution receipts, schema power.receipt.v1: what ran (model, configuration, device), on
// what (input digests), what came out (output digests), how long it took, signed with the
// runtime's Ed25519 key over the canonical JSON (receipt/canonical_json.h) of everything but
// the "signature" member. docs/RECEIPTS.md lists every field.
//
// Digests: token ids are hashed as little-endian int32s; text as its UTF-8 bytes; an input is
// hashed in its canonical form: a prompt as its UTF-8 bytes, prompt token ids as the canonical
// JSON array, chat messages as the canonical JSON array of {"content","role"} objects.
// Thread-safety: pure functions (device_json() reads the machine once, thread-safely).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "format/tensor_manifest.h"
#include "power/policy.h"
#include "power/request.h"
#include "receipt/policy.h"
#include "receipt/signing_key.h"

namespace power::receipt {

inline constexpr std::string_view kReceiptSchema = "power.receipt.v1";

// model: name (general.name, else the file name), sha256 (artifact), format, format_version,
// arch, tensors_sha256 (SHA-256 of the canonical JSON array, sorted by name, of
// {"name","type","shape","sha256"} per tensor; shape is ne[] innermost first) and n_tensors.
// The tensor digests come from `tensors` (format/tensor_manifest.h), the file's manifest.
nlohmann::json model_json(const GgufFile& file, const std::string& path,
                          const std::string& artifact_sha256, const std::string& arch,
                          const TensorManifest& tensors);

// device: kind "cpu", cpu_model, isa_flags, logical_cores, memory_bytes (MemTotal), gpu null,
// hardware: the static hardware record (base/machine.h machine_facts()).
nlohmann::json device_json();

std::string token_ids_sha256(std::span<const int32_t> ids);
// input: kind ("prompt", "prompt_tokens", "messages") and the canonical input's sha256.
nlohmann::json input_json(const GenerateRequest& req);

// The request-level part of config: sampling (floats are the exact binary32 values; the
// seed is a decimal string), max_tokens, max_tokens_up_to_context, stop, ignore_eos, add_bos.
nlohmann::json request_config_json(const GenerateRequest& req);
// Restores those fields into `req` (replay). kInvalidArgument on a malformed config.
Status request_config_from_json(const nlohmann::json& config, GenerateRequest& req);

nlohmann::json output_json(const Completion& c);
nlohmann::json timings_json(const Timings& t);

// Adds "signature" {alg, public_key, value} over the canonical form of `body` (which must
// not have one) and returns the canonical text of the whole receipt.
Result<std::string> sign_receipt(nlohmann::json body, const SigningKey& key);

// The facts a policy is checked against, read from a parsed receipt.
ExecutionFacts facts_from_receipt(const nlohmann::json& receipt);

// One line of `power verify`.
struct VerifyCheck {
  std::string name;  // "canonical", "schema", "signature", "model", "input", "output", "policy"
  bool ok = false;
  std::string detail;
};

struct VerifyOptions {
  std::optional<PublicKey> public_key;      // the key the signature must be by
  std::optional<AcceptancePolicy> policy;   // the caller's policy
  std::optional<std::string> request_json;  // {"prompt"|"prompt_tokens"|"messages": ...}
  std::optional<std::string> output_text;   // the text the execution returned
  std::optional<std::string> model_sha256;  // SHA-256 of the model file the caller holds
};

// Every check, in order; all must be ok for the receipt to be accepted.
std::vector<VerifyCheck> verify_receipt(std::string_view receipt_text, const VerifyOptions& o);

// The input of a request file ({"prompt": "..."}, {"prompt_tokens": [..]} or {"messages":
// [{"role","content"}, ...]}; other members, e.g. an OpenAI body's, are ignored), into `req`.
Status request_input_from_json(std::string_view request_json, GenerateRequest& req);

}  // namespace power::receipt
