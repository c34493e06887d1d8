// `power encrypt IN OUT --key-file K [--chunk-size N]`: writes an encrypted model container
// (secure/container.h, docs/CONFIDENTIAL.md "Encrypted weights");
// `power decrypt IN --verify --key-file K`: authenticates every chunk and the plaintext digest
// without writing the plaintext anywhere. Both take the key from $POWER_MODEL_KEY when
// --key-file is not given.
#include <cstdio>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "secure/container.h"
#include "secure/model_key.h"

namespace power::cli {
namespace {

struct SecureArgs {
  std::string in;
  std::string out;
  std::string key_file;
  uint64_t chunk_bytes = secure::kChunkBytesDefault;
  bool verify = false;
};

Result<secure::ModelKey> key_of(const SecureArgs& a) {
  POWER_ASSIGN_OR_RETURN(std::optional<secure::ModelKey> key,
                         secure::resolve_model_key(a.key_file, {}));
  if (!key) {
    return Status(
        StatusCode::kInvalidArgument,
        fmt::format("give the model key with --key-file (or set {})", secure::kModelKeyEnv));
  }
  return std::move(*key);
}

void print_info(const char* what, const std::string& path, const secure::ContainerInfo& info) {
  std::printf(
      "%s %s: %llu plaintext bytes in %llu chunks of %llu bytes\n"
      "plaintext sha256 %s\nkey id %s\n",
      what, path.c_str(), static_cast<unsigned long long>(info.plaintext_bytes),
      static_cast<unsigned long long>(info.chunks),
      static_cast<unsigned long long>(info.chunk_bytes), to_hex(info.plaintext_sha256).c_str(),
      secure::key_id_hex(info.key_id).c_str());
}

void run_encrypt(const SecureArgs& a) {
  auto key = key_of(a);
  if (!key.ok()) return report_error(key.status());
  auto info = secure::encrypt_file(a.in, a.out, *key, a.chunk_bytes);
  if (!info.ok()) return report_error(info.status());
  print_info("encrypted", a.out, *info);
}

void run_decrypt(const SecureArgs& a) {
  if (!a.verify) {
    return report_error(Status(StatusCode::kInvalidArgument,
                               "power decrypt only verifies (--verify): a plaintext copy on disk "
                               "is what the container exists to avoid"));
  }
  auto key = key_of(a);
  if (!key.ok()) return report_error(key.status());
  auto info = secure::verify_container_file(a.in, *key);
  if (!info.ok()) return report_error(info.status());
  print_info("verified", a.in, *info);
}

}  // namespace

void add_secure_commands(CLI::App& app) {
  static SecureArgs e;
  auto* enc = app.add_subcommand(
      "encrypt",
      "Encrypt a model into an authenticated AES-256-GCM container (power run/serve "
      "--model-key-file load it)");
  enc->add_option("in", e.in, "Plain model file (GGUF)")->required();
  enc->add_option("out", e.out, "Container to write (atomically; never the input)")->required();
  enc->add_option("--key-file", e.key_file,
                  "32 raw bytes or 64 hex digits (e.g. openssl rand -hex 32); default "
                  "$POWER_MODEL_KEY");
  enc->add_option("--chunk-size", e.chunk_bytes,
                  "Bytes per authenticated chunk: a power of two, 256 B to 1 GiB")
      ->capture_default_str();
  enc->callback([] { run_encrypt(e); });

  static SecureArgs d;
  auto* dec = app.add_subcommand("decrypt", "Check an encrypted model container with its key");
  dec->add_option("in", d.in, "Container (power encrypt)")->required();
  dec->add_option("--key-file", d.key_file, "The container's key; default $POWER_MODEL_KEY");
  dec->add_flag("--verify", d.verify,
                "Authenticate every chunk and the plaintext SHA-256; writes no plaintext");
  dec->callback([] { run_decrypt(d); });
}

}  // namespace power::cli
