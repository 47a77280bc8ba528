// lumenc: the Lumen compiler's command line. Reads a model program (.dsl) -
// or the IR text form (.ir) - and has the compile driver (driver/driver.h)
// check it, print a stage, or write model.so. Thin by design: flags in, one
// driver call, exit codes out (0 ok, 1 an error in the input or a failed
// stage, 2 bad usage, 70 an internal error: a bug in lumenc).
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <iostream>
#include <map>
#include <optional>

#include "cli/model_for_gguf.h"
#include "lumen/common/internal_error.h"
#include "lumen/driver/driver.h"
#include "lumen/ir/text.h"
#include "lumen/passes/passes.h"
#include "lumen/program/program.h"
#include "lumen/target/cpu_tune.h"
#include "lumen/target/isa.h"

namespace {

// A failure already explained to the user: print "lumenc: error: <what>" and exit 1.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// --set name=value pairs -> map.
std::map<std::string, double> parse_settings(const std::vector<std::string>& settings) {
  std::map<std::string, double> out;
  for (const auto& s : settings) {
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) throw Failure("--set expects name=value, got '" + s + "'");
    std::string value = s.substr(eq + 1);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != value.size()) throw Failure("--set " + s.substr(0, eq) + ": '" + value + "' is not a number");
    out[s.substr(0, eq)] = v;
  }
  return out;
}

// The arena sizes `dump-ir` reports after memory planning, as IR comments.
std::string arena_report(const lumen::ir::Module& m, const std::map<std::string, double>& settings) {
  std::string out;
  for (int64_t n : {1, 32, 512}) {
    std::string missing;
    std::optional<int64_t> bytes;
    try {
      bytes = lumen::passes::arena_bytes(m, settings, n, &missing);
    } catch (const lumen::InternalError&) {
      throw;
    } catch (const std::exception& e) {
      return fmt::format("// arena: cannot evaluate ({})\n", e.what());
    }
    if (!bytes)
      return fmt::format("// arena: needs a value for '{}' (give it with --set {}=VALUE)\n", missing, missing);
    out += fmt::format("// arena bytes at N={}: {} ({:.2f} MiB)\n", n, *bytes, static_cast<double>(*bytes) / (1 << 20));
  }
  return out;
}

lumen::Isa parse_target(const std::string& target) {
  if (target == "avx512-vnni") return lumen::Isa::Avx512Vnni;
  if (target == "avx512") return lumen::Isa::Avx512;
  if (target == "avx-vnni") return lumen::Isa::AvxVnni;
  if (target == "avx2") return lumen::Isa::Avx2;
  return lumen::best_isa(lumen::cpu_features());  // "native"
}

// --tune NAME; without it, `native` with --target native (as -march=native
// implies -mtune=native) and generic with a named ISA, whose model.so may
// run on any CPU of that ISA.
lumen::CpuTune parse_tune(const std::string& tune, const std::string& target) {
  if (tune.empty()) return target == "native" ? lumen::host_cpu_tune() : lumen::CpuTune::Generic;
  if (tune == "native") return lumen::host_cpu_tune();
  if (const std::optional<lumen::CpuTune> t = lumen::parse_cpu_tune(tune)) return *t;
  throw Failure("--tune '" + tune + "' is not one of " + lumen::cpu_tune_names() + ", native");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "lumenc - the Lumen compiler: a model architecture written in the Lumen DSL (.dsl) in,\n"
      "a shared object with generated x86-64 kernels (model.so) out; run it with lumen-run.\n"
      "Pipeline: DSL -> AST -> tensor IR -> passes (infer_shapes, fuse_*, insert_quantize,\n"
      "schedule, plan_memory) -> scheduled program -> kernels + model.so.\n"
      "Exit status: 0 ok, 1 errors in the input, 2 bad usage, 70 an internal error (a bug in lumenc).",
      "lumenc"};
  // At most one; "none" is reported after parsing so that a bad flag is named first.
  app.require_subcommand(0, 1);
  app.footer(
      "Examples:\n"
      "  lumenc check dsl/qwen2.dsl                      report errors and warnings\n"
      "  lumenc dump-ir dsl/qwen2.dsl                    the IR after all passes\n"
      "  lumenc dump-ir --after=fuse_qkv dsl/qwen2.dsl   the IR after one pass\n"
      "  lumenc dump-ir --after=all dsl/qwen2.dsl        the IR after every pass\n"
      "  lumenc dump-program dsl/qwen2.dsl               the scheduled program model.so embeds\n"
      "  lumenc compile dsl/qwen2.dsl -o qwen2.so        build model.so for this CPU\n"
      "  lumenc compile dsl/qwen2.dsl --weights F.gguf -o qwen2.so   ... for the tensor types of F.gguf\n"
      "Run `lumenc SUBCOMMAND --help` for the options of each.\n");

  std::string file;
  auto* check = app.add_subcommand(
      "check",
      "Check a model program: every stage but code generation, so a program it accepts compiles; print its diagnostics.");
  check->add_option("FILE", file, "the model program (.dsl), or IR text (.ir)")->required();
  check->footer("Example: lumenc check dsl/qwen2.dsl   (exit 1 when there are errors)\n");

  std::string after = "plan_memory", only;
  std::vector<std::string> settings;
  auto* dump_ir = app.add_subcommand("dump-ir", "Print the tensor IR after a pass (default: after all of them).");
  dump_ir->add_option("FILE", file, "the model program (.dsl), or IR text (.ir)")->required();
  std::string pass_list;
  for (const auto& p : lumen::passes::pipeline()) pass_list += std::string("\n    ") + p.name + ": " + p.summary;
  dump_ir->add_option("--after", after,
                      "print after this pass and stop, or `all` to print after every pass; `lower` prints the IR "
                      "before any pass. Passes, in order:" + pass_list);
  dump_ir->add_option("--only", only, "run just this pass on FILE (usually an .ir file) and print the result");
  dump_ir->add_option("--set", settings, "NAME=VALUE: a param value for the arena report (repeatable)");
  dump_ir->footer(
      "Examples:\n"
      "  lumenc dump-ir --after=fuse_qkv dsl/qwen2.dsl\n"
      "  lumenc dump-ir --after=all dsl/llama.dsl\n"
      "  lumenc dump-ir --only=fuse_qkv tests/passes/golden/fuse_qkv.in.ir\n"
      "  lumenc dump-ir --set n_vocab=151936 --set n_embd=896 --set n_ff=4864 --set n_head=14 \\\n"
      "         --set n_head_kv=2 dsl/qwen2.dsl     (arena size for Qwen2.5-0.5B at N=1, 32, 512)\n");

  // The schedule picks each matmul's kernels for the target: check, dump-ir
  // and dump-program run the pipeline compile would run for it.
  std::string target = "native";
  auto add_target = [&target](CLI::App* command) {
    command->add_option("--target", target, "avx512-vnni, avx512, avx-vnni, avx2, or native (this CPU's best)")
        ->check(CLI::IsMember({"avx512-vnni", "avx512", "avx-vnni", "avx2", "native"}));
  };
  add_target(check);
  add_target(dump_ir);
  // A program is compiled for one GGUF file's tensor types (`any` weights take
  // each tensor's); without --weights, every `any` weight is Q8_0.
  std::string weights;
  auto add_weights = [&weights](CLI::App* command) {
    command->add_option("--weights", weights,
                        "compile for the tensor types of this GGUF file (default: Q8_0 for every `any` weight)");
  };
  add_weights(check);
  add_weights(dump_ir);

  auto* dump_program = app.add_subcommand("dump-program", "Print the scheduled program (the text model.so embeds).");
  dump_program->add_option("FILE", file, "the model program (.dsl), or IR text (.ir)")->required();
  add_target(dump_program);
  add_weights(dump_program);
  dump_program->footer("Example: lumenc dump-program dsl/qwen2.dsl --target avx2\n");

  std::string output;
  auto* compile = app.add_subcommand("compile", "Compile to model.so (kernels for one x86-64 target).");
  compile->add_option("FILE", file, "the model program (.dsl)")->required();
  compile->add_option("-o,--output", output, "the shared object to write")->required();
  add_target(compile);
  add_weights(compile);
  std::string tune;
  compile->add_option("--tune", tune,
                      "tune the kernels' speed for a CPU, never their results: " + lumen::cpu_tune_names() +
                          ", or native (this CPU's; default with --target native, else generic)");
  compile->footer(
      "Examples:\n"
      "  lumenc compile dsl/qwen2.dsl -o qwen2.so --target avx2\n"
      "  lumenc compile dsl/qwen2.dsl -o qwen2.so --target avx512-vnni --tune zen4\n"
      "  lumenc compile dsl/qwen2.dsl --weights qwen2.5-0.5b-q4_k_m.gguf -o qwen2-q4_k_m.so\n");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error.
    std::cerr << "lumenc: error: " << e.what() << " (see lumenc --help)\n";
    return 2;
  }

  if (app.get_subcommands().empty()) {
    std::cerr << "lumenc: error: a subcommand is required: check, dump-ir, dump-program or compile (see lumenc --help)\n";
    return 2;
  }

  return lumen::run_tool("lumenc", [&]() -> int {
    lumen::driver::Options options;
    options.target = parse_target(target);
    options.tune = parse_tune(tune, target);
    if (!weights.empty()) options.weight_types = lumen::cli::weight_types_of(lumen::gguf::File::open(weights));
    std::map<std::string, double> values;
    bool all = false;
    if (*check) {
      options.stage = lumen::driver::Stage::Program;  // everything that can refuse the program
    } else if (*dump_ir) {
      values = parse_settings(settings);
      options.stage = lumen::driver::Stage::Ir;
      options.only_pass = only;
      all = after == "all";
      if (!all && after != "lower" && !lumen::passes::find_pass(after))
        throw Failure("unknown pass '" + after + "' (see lumenc dump-ir --help)");
      if (!only.empty() && !lumen::passes::find_pass(only))
        throw Failure("unknown pass '" + only + "' (see lumenc dump-ir --help)");
      if (all) {
        options.after_each = [](const lumen::passes::PassInfo& pass, const lumen::ir::Module& current) {
          std::cout << "// ----- IR after " << pass.name << " -----\n" << lumen::ir::print_module(current);
        };
      } else {
        options.stop_after = after;
      }
    } else if (*dump_program) {
      options.stage = lumen::driver::Stage::Program;
    } else {
      options.stage = lumen::driver::Stage::ModelSo;
      options.output = output;
    }

    lumen::driver::Compilation c;
    try {
      c = lumen::driver::compile(lumen::driver::Source::read(file), options);
    } catch (const lumen::driver::Error& e) {
      std::cerr << e.diagnostics;
      throw;
    }
    std::cerr << c.diags.format();  // warnings

    if (*dump_ir) {
      if (!all) std::cout << lumen::ir::print_module(*c.ir);
      if (only.empty() && c.ir->memory) std::cout << arena_report(*c.ir, values);
    }
    if (*dump_program) std::cout << lumen::program::serialize(*c.program);
    return 0;
  });
}
