// `power key show` (the runtime's receipt public key), `power verify` (check a receipt against
// the caller's key, files and policy) and `power replay` (re-run a recorded request and check
// that its output digests reproduce). docs/RECEIPTS.md.
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/sha256.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "kernels/cpu/isa.h"
#include "power/runtime.h"
#include "receipt/canonical_json.h"
#include "receipt/receipt.h"
#include "receipt/signing_key.h"

namespace power::cli {
namespace {

bool file_exists(const std::string& path) {
  struct stat sb {};
  return ::stat(path.c_str(), &sb) == 0;
}

// --pubkey: 64 hex digits, or a file holding them; absent: the local runtime key, if made.
Result<std::optional<receipt::PublicKey>> trusted_key(const std::string& pubkey) {
  if (!pubkey.empty()) {
    auto direct = receipt::parse_public_key_hex(pubkey);
    if (direct.ok()) return std::optional<receipt::PublicKey>(*direct);
    POWER_ASSIGN_OR_RETURN(std::string text, read_file_text(pubkey));
    auto from_file = receipt::parse_public_key_hex(text);
    if (!from_file.ok()) {
      return Status(StatusCode::kInvalidArgument,
                    "--pubkey is neither 64 hex digits nor a file holding them")
          .with("value", pubkey);
    }
    return std::optional<receipt::PublicKey>(*from_file);
  }
  const std::string dir = receipt::SigningKey::default_dir();
  if (!file_exists(dir + "/receipt-ed25519.key")) return std::optional<receipt::PublicKey>();
  POWER_ASSIGN_OR_RETURN(auto key, receipt::SigningKey::load_or_create(dir));
  return std::optional<receipt::PublicKey>(key->public_key());
}

void print_checks(const std::vector<receipt::VerifyCheck>& checks) {
  bool all = !checks.empty();
  for (const auto& c : checks) {
    std::printf("%s %s: %s\n", c.ok ? "PASS" : "FAIL", c.name.c_str(), c.detail.c_str());
    all = all && c.ok;
  }
  std::printf("%s\n", all ? "receipt accepted" : "receipt REJECTED");
  std::fflush(stdout);
  set_exit_code(all ? 0 : 1);
}

struct VerifyArgs {
  std::string receipt, pubkey, policy, request, output, model;
};

Status run_verify(const VerifyArgs& a, std::vector<receipt::VerifyCheck>& checks) {
  POWER_ASSIGN_OR_RETURN(std::string text, read_file_text(a.receipt));
  receipt::VerifyOptions o;
  POWER_ASSIGN_OR_RETURN(o.public_key, trusted_key(a.pubkey));
  if (!a.policy.empty()) {
    POWER_ASSIGN_OR_RETURN(std::string p, read_file_text(a.policy));
    POWER_ASSIGN_OR_RETURN(o.policy, parse_acceptance_policy(p));
  }
  if (!a.request.empty()) {
    POWER_ASSIGN_OR_RETURN(o.request_json, read_file_text(a.request));
  }
  if (!a.output.empty()) {
    POWER_ASSIGN_OR_RETURN(o.output_text, read_file_text(a.output));
  }
  if (!a.model.empty()) {
    POWER_ASSIGN_OR_RETURN(std::string path, resolve_model_path(a.model));
    POWER_ASSIGN_OR_RETURN(Sha256Digest d, sha256_file(path));
    o.model_sha256 = to_hex(d);
  }
  checks = receipt::verify_receipt(text, o);
  return Status();
}

struct ReplayArgs {
  std::string receipt, model, request, pubkey;
};

Status run_replay(const ReplayArgs& a, std::vector<receipt::VerifyCheck>& checks) {
  POWER_ASSIGN_OR_RETURN(std::string text, read_file_text(a.receipt));
  POWER_ASSIGN_OR_RETURN(std::string request_text, read_file_text(a.request));
  receipt::VerifyOptions vo;
  POWER_ASSIGN_OR_RETURN(vo.public_key, trusted_key(a.pubkey));
  vo.request_json = request_text;
  checks = receipt::verify_receipt(text, vo);
  for (const auto& c : checks) {
    if (!c.ok && c.name != "signature") return Status();  // nothing sound to replay
  }
  POWER_ASSIGN_OR_RETURN(nlohmann::json r, receipt::parse_json_strict(text));
  const nlohmann::json& cfg = r["config"];
  const std::string isa(cpu_isa_name(cpu_isa()));
  const bool same_isa = cfg["kernel_isa"] == isa;
  checks.push_back({"kernel_isa", same_isa,
                    same_isa ? "kernels run the recorded " + isa + " path"
                             : "recorded " + cfg["kernel_isa"].dump() + ", this process runs " +
                                   isa + " (set POWER_FORCE_ISA)"});
  try {
    LoadOptions lo;
    lo.threads = cfg.at("threads").get<int>();
    lo.kv_type = cfg.at("kv_type").get<std::string>();
    lo.n_ctx = cfg.at("n_ctx").get<int64_t>();
    lo.prefix_reuse = cfg.at("prefix_reuse").get<bool>();
    lo.max_running = 1;
    lo.max_waiting = 1;
    POWER_ASSIGN_OR_RETURN(auto rt, Runtime::create(RuntimeOptions{}));
    POWER_ASSIGN_OR_RETURN(std::string path, resolve_model_path(a.model));
    POWER_ASSIGN_OR_RETURN(ModelHandle m, rt->load(path, lo));
    const bool same_model = r["model"]["sha256"] == m.info().sha256;
    checks.push_back({"model", same_model,
                      same_model ? "the model file is the recorded artifact " + m.info().sha256
                                 : "the model file's sha256 " + m.info().sha256 +
                                       " is not the recorded " + r["model"]["sha256"].dump()});
    if (!same_model) return Status();
    GenerateRequest req;
    POWER_RETURN_IF_ERROR(receipt::request_input_from_json(request_text, req));
    POWER_RETURN_IF_ERROR(receipt::request_config_from_json(cfg, req));
    POWER_ASSIGN_OR_RETURN(RequestHandle h, rt->submit(m, std::move(req)));
    Completion c = h.wait();
    const nlohmann::json mine = receipt::output_json(c);
    const nlohmann::json& rec = r["output"];
    for (const char* field : {"tokens_sha256", "text_sha256", "finish"}) {
      const bool ok = mine[field] == rec[field];
      checks.push_back(
          {std::string("output.") + field, ok,
           ok ? "reproduced " + rec[field].dump()
              : "recorded " + rec[field].dump() + ", replay gave " + mine[field].dump()});
    }
  } catch (const nlohmann::json::exception& e) {
    return Status(StatusCode::kInvalidArgument, "the receipt's config is malformed")
        .with("error", e.what());
  }
  return Status();
}

}  // namespace

void add_receipt_commands(CLI::App& app) {
  auto* key = app.add_subcommand("key", "The runtime's receipt signing key");
  key->require_subcommand(1);
  static std::string keys_dir;
  auto* show = key->add_subcommand(
      "show", "Print the Ed25519 public key receipts are signed with (made on first use)");
  show->add_option("--keys-dir", keys_dir, "Key directory (default: $POWER_HOME/keys)");
  show->callback([] {
    const std::string dir = keys_dir.empty() ? receipt::SigningKey::default_dir() : keys_dir;
    auto k = receipt::SigningKey::load_or_create(dir);
    if (!k.ok()) return report_error(k.status());
    std::printf("%s\n", (*k)->public_key_hex().c_str());
    std::fprintf(stderr, "ed25519 receipt key in %s\n", dir.c_str());
  });

  static VerifyArgs va;
  auto* verify = app.add_subcommand(
      "verify", "Check a receipt: canonical form, schema, signature, input/output, policy");
  verify->add_option("receipt", va.receipt, "power.receipt.v1 JSON file")->required();
  verify->add_option("--pubkey", va.pubkey,
                     "Trusted public key (hex or a file; default: the local runtime key)");
  verify->add_option("--policy", va.policy, "Acceptance policy JSON file");
  verify->add_option("--request", va.request,
                     "Request JSON ({\"prompt\"|\"prompt_tokens\"|\"messages\": ...})");
  verify->add_option("--output", va.output, "The output text the execution returned");
  verify->add_option("-m,--model", va.model, "The model file the receipt must name");
  verify->callback([] {
    std::vector<receipt::VerifyCheck> checks;
    Status st = run_verify(va, checks);
    if (!st.ok()) return report_error(st);
    print_checks(checks);
  });

  static ReplayArgs ra;
  auto* replay = app.add_subcommand(
      "replay", "Re-run a recorded request and check that its output digests reproduce");
  replay->add_option("receipt", ra.receipt, "power.receipt.v1 JSON file")->required();
  replay->add_option("-m,--model", ra.model, "GGUF model file (must be the recorded artifact)")
      ->required();
  replay->add_option("--request", ra.request, "Request JSON the receipt was recorded for")
      ->required();
  replay->add_option("--pubkey", ra.pubkey, "Trusted public key (hex or a file)");
  replay->callback([] {
    std::vector<receipt::VerifyCheck> checks;
    Status st = run_replay(ra, checks);
    if (!st.ok()) return report_error(st);
    print_checks(checks);
  });
}

}  // namespace power::cli
