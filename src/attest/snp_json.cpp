// SnpEvidence and SnpPolicy to and from JSON. Both parsers are strict (unknown keys and wrong
// types are errors): a misspelt policy key that silently pinned nothing would fail open.
#include <nlohmann/json.hpp>

#include "attest/snp_verify.h"
#include "attest/x509_util.h"

namespace power::attest {
namespace {

using nlohmann::json;

Status check_keys(const json& j, std::initializer_list<std::string_view> allowed,
                  std::string_view what) {
  if (!j.is_object()) {
    return make_error(StatusCode::kInvalidArgument, "{} must be a JSON object", what);
  }
  for (const auto& [key, value] : j.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return make_error(StatusCode::kInvalidArgument, "{} has an unknown key", what)
          .with("key", key);
    }
  }
  return Status();
}

Status check_type(const json& j, std::string_view what) {
  if (j.contains("type") && (!j["type"].is_string() || j["type"] != "sev-snp")) {
    return make_error(StatusCode::kUnsupported, "{} type must be \"sev-snp\"", what)
        .with("type", j["type"].dump());
  }
  return Status();
}

Result<std::string> get_string(const json& j, const char* key, std::string_view what) {
  if (!j[key].is_string()) {
    return make_error(StatusCode::kInvalidArgument, "{} \"{}\" must be a string", what, key);
  }
  return j[key].get<std::string>();
}

template <size_t N>
Result<std::array<uint8_t, N>> get_hex(const json& j, const char* key) {
  POWER_ASSIGN_OR_RETURN(std::string text, get_string(j, key, "policy"));
  std::array<uint8_t, N> out{};
  POWER_RETURN_IF_ERROR(parse_snp_hex(text, out, fmt::format("policy \"{}\"", key)));
  return out;
}

template <size_t N>
Result<std::vector<std::array<uint8_t, N>>> get_hex_list(const json& j, const char* key) {
  if (!j[key].is_array()) {
    return make_error(StatusCode::kInvalidArgument, "policy \"{}\" must be an array", key);
  }
  std::vector<std::array<uint8_t, N>> out;
  for (size_t i = 0; i < j[key].size(); ++i) {
    const json& item = j[key][i];
    if (!item.is_string()) {
      return make_error(StatusCode::kInvalidArgument, "policy \"{}\" items must be strings", key)
          .with("index", i);
    }
    std::array<uint8_t, N> value{};
    POWER_RETURN_IF_ERROR(
        parse_snp_hex(item.get<std::string>(), value, fmt::format("policy \"{}\"[{}]", key, i)));
    out.push_back(value);
  }
  return out;
}

Result<bool> get_bool(const json& j, const char* key) {
  if (!j[key].is_boolean()) {
    return make_error(StatusCode::kInvalidArgument, "policy \"{}\" must be true or false", key);
  }
  return j[key].get<bool>();
}

Result<int64_t> get_int(const json& j, const char* key, int64_t min, int64_t max) {
  if (!j[key].is_number_integer()) {
    return make_error(StatusCode::kInvalidArgument, "policy \"{}\" must be an integer", key);
  }
  // Unsigned values above INT64_MAX read as negative here and fail the range check.
  const int64_t v = j[key].get<int64_t>();
  if (v < min || v > max || (j[key].is_number_unsigned() && j[key].get<uint64_t>() > INT64_MAX)) {
    return make_error(StatusCode::kOutOfRange, "policy \"{}\" is out of range", key)
        .with("min", min)
        .with("max", max);
  }
  return v;
}

// A certificate in evidence JSON: PEM text, or base64 of DER.
Result<std::vector<uint8_t>> get_cert(const json& j, const char* key) {
  POWER_ASSIGN_OR_RETURN(std::string text, get_string(j, key, "evidence"));
  if (text.find("-----BEGIN") != std::string::npos) {
    return detail::certificate_der(
        std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()), key);
  }
  auto der = detail::base64_decode(text);
  if (!der.ok()) {
    return make_error(StatusCode::kCorrupt, "evidence \"{}\" is neither PEM nor base64 DER", key)
        .with("detail", der.status().message());
  }
  return der;
}

}  // namespace

Result<SnpEvidence> SnpEvidence::from_parts(std::span<const uint8_t> report,
                                            std::span<const uint8_t> vcek_pem_or_der,
                                            std::span<const uint8_t> ask_pem_or_der,
                                            std::span<const uint8_t> ark_pem_or_der) {
  SnpEvidence e;
  e.report.assign(report.begin(), report.end());
  POWER_ASSIGN_OR_RETURN(e.vcek, detail::certificate_der(vcek_pem_or_der, "VCEK"));
  if (!ask_pem_or_der.empty()) {
    POWER_ASSIGN_OR_RETURN(e.ask, detail::certificate_der(ask_pem_or_der, "ASK"));
  }
  if (!ark_pem_or_der.empty()) {
    POWER_ASSIGN_OR_RETURN(e.ark, detail::certificate_der(ark_pem_or_der, "ARK"));
  }
  return e;
}

Result<SnpEvidence> SnpEvidence::from_json(const json& j) {
  POWER_RETURN_IF_ERROR(check_keys(j, {"type", "report", "vcek", "ask", "ark"}, "evidence"));
  POWER_RETURN_IF_ERROR(check_type(j, "evidence"));
  if (!j.contains("report") || !j.contains("vcek")) {
    return make_error(StatusCode::kInvalidArgument, "evidence needs \"report\" and \"vcek\"");
  }
  SnpEvidence e;
  POWER_ASSIGN_OR_RETURN(std::string report_b64, get_string(j, "report", "evidence"));
  auto report = detail::base64_decode(report_b64);
  if (!report.ok()) {
    return make_error(StatusCode::kCorrupt, "evidence \"report\" is not base64")
        .with("detail", report.status().message());
  }
  e.report = std::move(report).value();
  POWER_ASSIGN_OR_RETURN(e.vcek, get_cert(j, "vcek"));
  if (j.contains("ask")) {
    POWER_ASSIGN_OR_RETURN(e.ask, get_cert(j, "ask"));
  }
  if (j.contains("ark")) {
    POWER_ASSIGN_OR_RETURN(e.ark, get_cert(j, "ark"));
  }
  return e;
}

Result<SnpEvidence> SnpEvidence::from_json_text(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(StatusCode::kCorrupt, "evidence is not valid JSON");
  return from_json(j);
}

json SnpEvidence::to_json() const {
  json j = {{"type", "sev-snp"},
            {"report", detail::base64_encode(report)},
            {"vcek", detail::base64_encode(vcek)}};
  if (!ask.empty()) j["ask"] = detail::base64_encode(ask);
  if (!ark.empty()) j["ark"] = detail::base64_encode(ark);
  return j;
}

std::string SnpEvidence::to_json_text() const {
  return to_json().dump();
}

Result<SnpPolicy> SnpPolicy::from_json(const json& j) {
  POWER_RETURN_IF_ERROR(check_keys(
      j,
      {"type", "measurements", "report_data", "allow_debug", "max_vmpl", "min_tcb", "host_data",
       "id_key_digest", "trusted_ark_sha256", "check_cert_validity", "verify_time_unix"},
      "policy"));
  POWER_RETURN_IF_ERROR(check_type(j, "policy"));
  SnpPolicy p;
  if (j.contains("measurements")) {
    POWER_ASSIGN_OR_RETURN(p.measurements, get_hex_list<48>(j, "measurements"));
  }
  if (j.contains("report_data")) {
    POWER_ASSIGN_OR_RETURN(p.report_data, get_hex<64>(j, "report_data"));
  }
  if (j.contains("allow_debug")) {
    POWER_ASSIGN_OR_RETURN(p.allow_debug, get_bool(j, "allow_debug"));
  }
  if (j.contains("max_vmpl")) {
    POWER_ASSIGN_OR_RETURN(int64_t vmpl, get_int(j, "max_vmpl", 0, 3));
    p.max_vmpl = static_cast<uint32_t>(vmpl);
  }
  if (j.contains("min_tcb")) {
    const json& t = j["min_tcb"];
    POWER_RETURN_IF_ERROR(
        check_keys(t, {"bootloader", "tee", "snp", "microcode", "fmc"}, "policy \"min_tcb\""));
    SnpMinTcb min;
    for (const auto& [key, field] :
         {std::pair{"bootloader", &min.bootloader}, std::pair{"tee", &min.tee},
          std::pair{"snp", &min.snp}, std::pair{"microcode", &min.microcode},
          std::pair{"fmc", &min.fmc}}) {
      if (!t.contains(key)) continue;
      POWER_ASSIGN_OR_RETURN(int64_t v, get_int(t, key, 0, 255));
      *field = static_cast<uint8_t>(v);
    }
    p.min_tcb = min;
  }
  if (j.contains("host_data")) {
    POWER_ASSIGN_OR_RETURN(p.host_data, get_hex<32>(j, "host_data"));
  }
  if (j.contains("id_key_digest")) {
    POWER_ASSIGN_OR_RETURN(p.id_key_digest, get_hex<48>(j, "id_key_digest"));
  }
  if (j.contains("trusted_ark_sha256")) {
    POWER_ASSIGN_OR_RETURN(p.trusted_ark_sha256, get_hex_list<32>(j, "trusted_ark_sha256"));
    if (p.trusted_ark_sha256.empty()) {
      // An empty list would mean "the built-ins", which is not what someone writing the key
      // meant; refuse rather than guess.
      return make_error(StatusCode::kInvalidArgument,
                        "policy \"trusted_ark_sha256\" is empty (omit it to use AMD's roots)");
    }
  }
  if (j.contains("check_cert_validity")) {
    POWER_ASSIGN_OR_RETURN(p.check_cert_validity, get_bool(j, "check_cert_validity"));
  }
  if (j.contains("verify_time_unix")) {
    POWER_ASSIGN_OR_RETURN(p.verify_time_unix,
                           get_int(j, "verify_time_unix", 0, int64_t{253402300799}));
  }
  return p;
}

Result<SnpPolicy> SnpPolicy::from_json_text(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(StatusCode::kCorrupt, "policy is not valid JSON");
  return from_json(j);
}

}  // namespace power::attest
