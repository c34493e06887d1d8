// The store commands: `power pull`, `ls`, `show`, `rm` and `ps`. See docs/STORE.md.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "cli/commands.h"
#include "store/download.h"
#include "store/layout.h"
#include "store/manifest.h"
#include "store/models.h"
#include "store/progress.h"
#include "store/pull.h"

namespace power::cli {
namespace {

using nlohmann::json;
namespace st = power::store;

constexpr const char* kDefaultServer = "127.0.0.1:8080";

void fail(const Status& status) {
  std::fprintf(stderr, "power: error: %s\n", status.to_string().c_str());
  set_exit_code(1);
}

Result<st::StoreLayout> open_store() {
  return st::StoreLayout::open_default();
}

struct PullArgs {
  std::vector<std::string> sources;
  std::string name;
  std::vector<std::string> sha256;
  std::vector<uint64_t> sizes;
  std::vector<std::string> roles;
  std::string format;
  std::string license;
  std::vector<std::string> params;
  bool verify = false;
  std::string progress = "auto";
};

Result<st::PullRequest> make_request(const PullArgs& a) {
  auto count_ok = [&](size_t n) { return n == 0 || n == a.sources.size(); };
  if (!count_ok(a.sha256.size()) || !count_ok(a.sizes.size()) || !count_ok(a.roles.size())) {
    return Status(StatusCode::kInvalidArgument,
                  "give --sha256, --size and --role once per SOURCE, in the same order, or not "
                  "at all");
  }
  st::PullRequest r;
  for (size_t i = 0; i < a.sources.size(); ++i) {
    st::PartRequest p;
    p.source = a.sources[i];
    if (!a.sha256.empty()) {
      POWER_ASSIGN_OR_RETURN(Sha256Digest d, st::parse_digest(a.sha256[i]));
      p.sha256 = d;
    }
    if (!a.sizes.empty()) p.size_bytes = a.sizes[i];
    if (!a.roles.empty()) p.role = a.roles[i];
    r.parts.push_back(std::move(p));
  }
  r.name = a.name;
  r.format = a.format;
  r.license = a.license;
  r.verify_existing = a.verify;
  for (const auto& kv : a.params) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status(StatusCode::kInvalidArgument, "--param takes KEY=VALUE").with("param", kv);
    }
    std::string value = kv.substr(eq + 1);
    json v = json::parse(value, nullptr, false);
    r.parameters[kv.substr(0, eq)] = v.is_discarded() ? json(value) : v;
  }
  return r;
}

void run_pull(const PullArgs& a) {
  std::signal(SIGPIPE, SIG_IGN);  // libcurl runs with CURLOPT_NOSIGNAL
  auto layout = open_store();
  if (!layout.ok()) return fail(layout.status());
  auto config = st::load_store_config(*layout);
  if (!config.ok()) return fail(config.status());
  auto request = make_request(a);
  if (!request.ok()) return fail(request.status());
  st::ProgressStyle style = a.progress == "bar"    ? st::ProgressStyle::kBar
                            : a.progress == "json" ? st::ProgressStyle::kJsonLines
                            : a.progress == "none" ? st::ProgressStyle::kNone
                                                   : st::ProgressStyle::kAuto;
  st::PullOptions options;
  options.config = std::move(config).value();
  options.progress = st::make_progress_printer(style, stderr);
  auto m = st::pull(*layout, *request, options);
  if (!m.ok()) return fail(m.status());
  std::printf("pulled %s (%s, %zu part%s, %s)\n", m->name.c_str(),
              st::format_bytes(m->size_bytes()).c_str(), m->parts.size(),
              m->parts.size() == 1 ? "" : "s", st::digest_string(m->parts[0].digest).c_str());
}

void run_ls(bool as_json) {
  auto layout = open_store();
  if (!layout.ok()) return fail(layout.status());
  auto entries = st::list_manifests(*layout);
  if (!entries.ok()) return fail(entries.status());
  if (as_json) {
    json out = json::array();
    for (const auto& e : *entries) {
      json j;
      j["name"] = e.name;
      if (e.manifest) {
        j["digest"] = st::digest_string(e.manifest->parts[0].digest);
        j["size_bytes"] = e.manifest->size_bytes();
        j["format"] = e.manifest->format;
        j["parts"] = e.manifest->parts.size();
        j["created"] = e.manifest->created;
      } else {
        j["error"] = e.error.to_string();
      }
      out.push_back(std::move(j));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("%-32s %-14s %-10s %-8s %s\n", "NAME", "ID", "SIZE", "FORMAT", "CREATED");
  for (const auto& e : *entries) {
    if (!e.manifest) {
      std::printf("%-32s (unreadable: %s)\n", e.name.c_str(), e.error.to_string().c_str());
      continue;
    }
    const auto& m = *e.manifest;
    std::printf("%-32s %-14s %-10s %-8s %s\n", m.name.c_str(),
                to_hex(m.parts[0].digest).substr(0, 12).c_str(),
                st::format_bytes(m.size_bytes()).c_str(), m.format.c_str(), m.created.c_str());
  }
}

void run_show(const std::string& name, bool as_json, bool verify) {
  auto layout = open_store();
  if (!layout.ok()) return fail(layout.status());
  auto resolved = st::resolve_model(*layout, name, verify);
  if (!resolved.ok()) return fail(resolved.status());
  const st::Manifest& m = resolved->manifest;
  if (as_json) {
    std::printf("%s", st::manifest_to_json(m).c_str());
    return;
  }
  std::printf("name        %s\n", m.name.c_str());
  std::printf("format      %s\n", m.format.c_str());
  std::printf("size        %s (%llu bytes)\n", st::format_bytes(m.size_bytes()).c_str(),
              static_cast<unsigned long long>(m.size_bytes()));
  std::printf("created     %s\n", m.created.c_str());
  if (!m.license.empty()) std::printf("license     %s\n", m.license.c_str());
  if (!m.parameters.empty()) std::printf("parameters  %s\n", m.parameters.dump().c_str());
  std::printf("parts\n");
  for (const auto& p : resolved->parts) {
    std::printf("  %-10s %s\n", p.part.role.c_str(), p.part.filename.c_str());
    std::printf("             %s  %llu bytes\n", st::digest_string(p.part.digest).c_str(),
                static_cast<unsigned long long>(p.part.size_bytes));
    std::printf("             blob %s\n", p.path.c_str());
    if (!p.part.source.empty()) std::printf("             from %s\n", p.part.source.c_str());
  }
  std::printf("blobs       %s\n", verify ? "present, sizes and SHA-256 verified"
                                         : "present, sizes checked (--verify hashes them)");
}

void run_rm(const std::vector<std::string>& names) {
  auto layout = open_store();
  if (!layout.ok()) return fail(layout.status());
  auto removed = st::remove_models(
      *layout, names, [] { std::fprintf(stderr, "waiting for running pulls to finish...\n"); });
  if (!removed.ok()) return fail(removed.status());
  for (const auto& n : removed->removed_models) std::printf("deleted '%s'\n", n.c_str());
  std::printf("freed %s (%zu blob%s)\n", st::format_bytes(removed->garbage.freed_bytes).c_str(),
              removed->garbage.removed.size(), removed->garbage.removed.size() == 1 ? "" : "s");
}

void run_ps(bool as_json) {
  const char* env = std::getenv("POWER_HOST");
  std::string host = env != nullptr && *env != '\0' ? env : kDefaultServer;
  std::string base = host.find("://") == std::string::npos ? "http://" + host : host;
  while (!base.empty() && base.back() == '/') base.pop_back();
  auto r = st::http_get(base + "/api/ps", 16 << 20, 5000);
  if (!r.ok()) {
    return fail(
        Status(StatusCode::kIo, fmt::format("no Power server is running at {} ({}); start one with "
                                            "`power serve` or set POWER_HOST",
                                            base, r.status().message())));
  }
  if (r->status != 200) {
    return fail(Status(StatusCode::kUnsupported,
                       fmt::format("the server at {} does not list loaded models (HTTP {} on "
                                   "/api/ps)",
                                   base, r->status)));
  }
  json j = json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("models") || !j["models"].is_array()) {
    return fail(Status(StatusCode::kCorrupt,
                       "the server's /api/ps answer is not "
                       "{\"models\": [...]}"));
  }
  if (as_json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%-32s %-14s %-10s %-36s %s\n", "NAME", "ID", "SIZE", "WEIGHTS", "UNTIL");
  for (const auto& m : j["models"]) {
    if (!m.is_object()) continue;
    std::string digest = m.value("digest", "");
    if (digest.starts_with("sha256:")) digest = digest.substr(7);
    // Weights residency (docs/RESIDENCY.md): all resident, or how much streams and has been read.
    std::string weights = m.value("residency", "");
    if (m.contains("weights") && m["weights"].is_object() && weights == "streamed") {
      const json& w = m["weights"];
      weights = fmt::format("{} resident, {} streamed, {} read",
                            st::format_bytes(w.value("pinned_bytes", uint64_t{0})),
                            st::format_bytes(w.value("streamed_bytes", uint64_t{0})),
                            st::format_bytes(w.value("read_bytes", uint64_t{0})));
      // A partial mirror (--mirror-dir): what it served, and reads it could not serve.
      if (w.contains("mirror") && w["mirror"].is_object()) {
        const json& mi = w["mirror"];
        weights +=
            fmt::format(" + {} from mirror", st::format_bytes(mi.value("read_bytes", uint64_t{0})));
        if (const uint64_t f = mi.value("fallbacks", uint64_t{0}); f > 0) {
          weights += fmt::format(" ({} fallback{})", f, f == 1 ? "" : "s");
        }
      }
      if (const double per = w.value("read_bytes_per_token", 0.0); per > 0) {
        weights += fmt::format(", {}/token", st::format_bytes(static_cast<uint64_t>(per)));
      }
    }
    std::printf("%-32s %-14s %-10s %-36s %s\n", m.value("name", "?").c_str(),
                digest.substr(0, 12).c_str(),
                st::format_bytes(m.value("size_bytes", uint64_t{0})).c_str(), weights.c_str(),
                m.value("expires_at", "").c_str());
  }
}

}  // namespace

void add_store_commands(CLI::App& app) {
  auto args = std::make_shared<PullArgs>();
  CLI::App* pull = app.add_subcommand(
      "pull", "Download a model (or a bundle of files) into the store, verified");
  pull->add_option("source", args->sources,
                   "http(s) URL, file path or hf://owner/repo[@rev]/path; several make a bundle")
      ->required();
  pull->add_option("--name", args->name, "model name (default: the first file's name)");
  pull->add_option("--sha256", args->sha256, "expected SHA-256, one per SOURCE (pins the bytes)");
  pull->add_option("--size", args->sizes, "expected size in bytes, one per SOURCE");
  pull->add_option("--role", args->roles, "part role (model, tokenizer, ...), one per SOURCE");
  pull->add_option("--format", args->format, "gguf, llama2c, onnx, ... (default: detected)");
  pull->add_option("--license", args->license, "license recorded in the manifest");
  pull->add_option("--param", args->params, "default parameter KEY=VALUE (JSON value)");
  pull->add_flag("--verify", args->verify, "hash an existing blob before reusing it");
  pull->add_option("--progress", args->progress, "auto, bar, json or none")
      ->check(CLI::IsMember({"auto", "bar", "json", "none"}));
  pull->callback([args] { run_pull(*args); });

  auto ls_json = std::make_shared<bool>(false);
  CLI::App* ls = app.add_subcommand("ls", "List the models in the store");
  ls->alias("list");
  ls->add_flag("--json", *ls_json, "JSON output");
  ls->callback([ls_json] { run_ls(*ls_json); });

  auto show_name = std::make_shared<std::string>();
  auto show_json = std::make_shared<bool>(false);
  auto show_verify = std::make_shared<bool>(false);
  CLI::App* show = app.add_subcommand("show", "Show a model's manifest and check its blobs");
  show->add_option("name", *show_name, "model name")->required();
  show->add_flag("--json", *show_json, "print the manifest (power.manifest.v1)");
  show->add_flag("--verify", *show_verify, "hash every blob");
  show->callback([=] { run_show(*show_name, *show_json, *show_verify); });

  auto rm_names = std::make_shared<std::vector<std::string>>();
  CLI::App* rm = app.add_subcommand("rm", "Remove models and the blobs no other model uses");
  rm->add_option("name", *rm_names, "model names")->required();
  rm->callback([rm_names] { run_rm(*rm_names); });

  auto ps_json = std::make_shared<bool>(false);
  CLI::App* ps = app.add_subcommand("ps", "List the models loaded in the running server");
  ps->add_flag("--json", *ps_json, "JSON output");
  ps->callback([ps_json] { run_ps(*ps_json); });
}

}  // namespace power::cli
