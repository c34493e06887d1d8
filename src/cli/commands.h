// The `power` command's subcommands. Each group lives in its own cmd_*.cpp and registers its
// subcommands on the CLI11 app; main.cpp calls every add_* in one visible place.
// A subcommand's callback sets the process exit code through set_exit_code().
#pragma once

#include <CLI/CLI.hpp>

namespace power::cli {

void set_exit_code(int code);
int exit_code();

void add_inspect_commands(CLI::App& app);    // inspect, tensor
void add_quantize_commands(CLI::App& app);   // quantize
void add_run_commands(CLI::App& app);        // run, logits, convert
void add_text_commands(CLI::App& app);       // tokenize, detokenize
void add_template_commands(CLI::App& app);   // template
void add_bench_commands(CLI::App& app);      // bench
void add_dev_commands(CLI::App& app);        // dev synth
void add_receipt_commands(CLI::App& app);    // key show, verify, replay
void add_secure_commands(CLI::App& app);     // encrypt, decrypt --verify
void add_attest_commands(CLI::App& app);     // attest verify (RA-TLS)
void add_store_commands(CLI::App& app);      // pull, ls, show, rm, ps (POWER_WITH_STORE)
void add_onnx_commands(CLI::App& app);       // onnx inspect/run, classify, vad, ocr
void add_serve_commands(CLI::App& app);      // serve
void add_embed_commands(CLI::App& app);      // embed
void add_validate_commands(CLI::App& app);   // perplexity, hardware, ab (+ verify)
void add_residency_commands(CLI::App& app);  // residency plan

}  // namespace power::cli
