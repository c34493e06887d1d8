// `power residency plan`: where a model's weights would live under a weights budget (the plan
// `power run` / `power serve --weights-budget` apply; device/residency.h, docs/RESIDENCY.md).
#include <cstdio>
#include <string>

#include "base/sha256.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "device/residency.h"
#include "format/gguf.h"
#include "host/model.h"

namespace power::cli {
namespace {

struct PlanArgs {
  std::string model;
  std::string budget;
  bool json = false;
};

Status print_plan(const PlanArgs& a) {
  POWER_ASSIGN_OR_RETURN(std::string path, resolve_model_path(a.model));
  POWER_ASSIGN_OR_RETURN(WeightsBudget budget, parse_weights_budget(a.budget));
  POWER_ASSIGN_OR_RETURN(Sha256Digest digest, sha256_file(path));
  POWER_ASSIGN_OR_RETURN(auto file, GgufFile::open(path));
  LoadModelOptions o;
  o.sha256 = to_hex(digest);
  o.weights_budget = budget;
  POWER_ASSIGN_OR_RETURN(auto model,
                         load_model(std::shared_ptr<const GgufFile>(std::move(file)), o));
  const ResidencyPlan& plan = model->residency();
  if (a.json) {
    std::printf("%s\n", plan.to_json().dump(2).c_str());
  } else {
    std::printf("%s", plan.to_text().c_str());
    if (model->streamer() != nullptr) {
      std::printf("staging   %llu bytes (%d slots + read buffer; prefetch %d groups)\n",
                  static_cast<unsigned long long>(model->streamer()->staging_bytes()),
                  model->streamer()->slot_count(), model->streamer()->lookahead());
    }
  }
  return Status();
}

}  // namespace

void add_residency_commands(CLI::App& app) {
  auto* res = app.add_subcommand("residency", "Weights residency under a memory budget");
  res->require_subcommand(1);
  auto a = std::make_shared<PlanArgs>();
  auto* plan = res->add_subcommand(
      "plan", "Print which weights stay resident and which are streamed under a budget");
  plan->add_option("-m,--model", a->model, "GGUF file or store name")->required();
  plan->add_option("--budget", a->budget, "Weights budget: bytes (800M, 1.5GiB) or a percentage")
      ->required();
  plan->add_flag("--json", a->json, "Print the plan as JSON (schema power.residency-plan/1)");
  plan->callback([a] {
    Status st = print_plan(*a);
    if (!st.ok()) report_error(st);
  });
}

}  // namespace power::cli
