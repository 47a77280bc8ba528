// compile(): source -> AST -> IR -> passes -> program -> kernels / model.so
// (see driver/driver.h).
#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <string_view>

#include "lumen/codegen/codegen.h"
#include "lumen/common/internal_error.h"
#include "lumen/driver/driver.h"
#include "lumen/dsl/frontend.h"
#include "lumen/ir/lower_ast.h"
#include "lumen/ir/text.h"
#include "lumen/ir/verifier.h"

namespace lumen::driver {

Error::Error(const std::string& message, std::string diagnostics)
    : std::runtime_error(message), diagnostics(std::move(diagnostics)) {}

Source Source::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("cannot read '" + path + "'");
  return {path, ss.str()};
}

bool Source::is_ir() const {
  constexpr std::string_view kSuffix = ".ir";
  return file.size() >= kSuffix.size() && file.compare(file.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

namespace {

[[noreturn]] void fail_with_diagnostics(const Source& source, const DiagnosticEngine& diags) {
  LUMEN_ASSERT(diags.has_errors(), "'" + source.file + "' was refused without an error diagnostic");
  throw Error(fmt::format("{} error(s) in '{}'", diags.error_count(), source.file), diags.format());
}

// The range of DSL line `line` without its indentation, comment and trailing
// space: where a pass's complaint about an op of that line points.
SourceRange statement_range(const Source& source, int line) {
  size_t begin = 0;
  for (int l = 1; l < line && begin != std::string::npos; ++l) {
    begin = source.text.find('\n', begin);
    if (begin != std::string::npos) ++begin;
  }
  LUMEN_ASSERT(begin != std::string::npos && begin <= source.text.size(),
               fmt::format("an op of '{}' names line {}, past the end of the file", source.file, line));
  size_t end = std::min(source.text.find('\n', begin), source.text.size());
  bool in_string = false;  // a comment ends the statement
  for (size_t i = begin; i < end; ++i) {
    if (source.text[i] == '"') in_string = !in_string;
    if (source.text[i] == '#' && !in_string) end = i;
  }
  size_t first = begin;
  while (first < end && (source.text[first] == ' ' || source.text[first] == '\t')) ++first;
  size_t last = end;
  while (last > first && std::isspace(static_cast<unsigned char>(source.text[last - 1]))) --last;
  auto col = [&](size_t at) { return static_cast<int>(at - begin) + 1; };
  return {source.file, {line, col(first)}, {line, col(last)}};
}

// The IR of `source` before any pass, verified (open types allowed).
ir::Module lower(const Source& source, Compilation& c) {
  if (source.is_ir()) {
    ir::Module m;
    try {
      m = ir::parse_module(source.text);
    } catch (const ir::IrError& e) {
      throw Error(source.file + ": " + e.what());
    }
    auto problems = ir::verify(m, /*require_types=*/false);
    if (!problems.empty()) throw Error("the IR of '" + source.file + "' does not verify: " + problems.front());
    return m;
  }
  c.ast = dsl::parse_and_check(source.file, source.text, c.diags);
  if (!c.ast) fail_with_diagnostics(source, c.diags);
  std::optional<ir::Module> m = ir::lower_ast(*c.ast, c.diags);
  if (!m) fail_with_diagnostics(source, c.diags);
  auto problems = ir::verify(*m, /*require_types=*/false);
  LUMEN_ASSERT(problems.empty(), "the IR lowered from a checked program does not verify: " + problems.front());
  return std::move(*m);
}

// Runs `passes` (one pass, or the pipeline) on `m`. An .ir source is the
// user's own IR: what a pass refuses in it is a one-line error. A DSL
// program passed the front end, whose rules are the ones the passes apply, so
// a refusal must name the op's line (a limit of the passes, such as memory
// planning's in-place rules); one without a line is a broken promise.
void run_passes(const Source& source, Compilation& c, const std::function<void()>& passes) {
  try {
    passes();
  } catch (const ir::IrError& e) {
    if (source.is_ir()) throw Error(source.file + ": " + e.what());
    LUMEN_ASSERT(e.line > 0, std::string("a pass refused a program the front end accepted: ") + e.what());
    c.diags.error(statement_range(source, e.line), e.what());
    fail_with_diagnostics(source, c.diags);
  }
}

}  // namespace

Compilation compile(const Source& source, const Options& options) {
  Compilation c;
  ir::Module m = lower(source, c);
  bind_weight_types(m, options.weight_types);

  if (!options.only_pass.empty()) {
    LUMEN_ASSERT(options.stage == Stage::Ir, "only_pass is for Stage::Ir");
    const passes::PassInfo* pass = passes::find_pass(options.only_pass);
    if (!pass) throw Error("unknown pass '" + options.only_pass + "'");
    // Every pass after infer_shapes relies on a fully typed IR, which the
    // pipeline guarantees; a source that starts later has to state it.
    if (pass->name != std::string_view("infer_shapes")) {
      auto problems = ir::verify(m, /*require_types=*/true);
      if (!problems.empty())
        throw Error(std::string(pass->name) + " alone needs a fully typed IR (run infer_shapes first): " +
                    problems.front());
    }
    run_passes(source, c, [&] {
      pass->run(m, options.target);
      ir::verify_or_throw(m);
    });
    c.ir = std::move(m);
    return c;
  }

  const bool stops_early = options.stage == Stage::Ir && !options.stop_after.empty();
  if (stops_early && options.stop_after == "lower") {
    c.ir = std::move(m);
    return c;
  }
  if (stops_early && !passes::find_pass(options.stop_after))
    throw Error("unknown pass '" + options.stop_after + "'");
  run_passes(source, c,
             [&] { passes::run_pipeline(m, options.target, options.after_each, stops_early ? options.stop_after : std::string()); });
  if (options.stage == Stage::Ir) {
    c.ir = std::move(m);
    return c;
  }

  c.program = passes::lower_to_program(m);
  c.ir = std::move(m);
  if (options.stage == Stage::Kernels) {
    for (const program::Section s : program::kSections)
      for (const program::Op& op : c.program->ops(s))
        if (op.kind == ops::OpId::MatMul)
          for (const program::KernelId& k : op.schedule.kernels()) {
            std::vector<uint8_t>& code = c.kernels[program::to_string(k)];
            if (code.empty()) code = codegen::generate_matmul_kernel(options.target, k, options.tune);
          }
  }
  if (options.stage == Stage::ModelSo) {
    try {
      codegen::emit_model_so(*c.program, options.target, options.tune, options.output);
    } catch (const std::runtime_error& e) {
      throw Error(std::string("compiling '") + source.file + "': " + e.what());
    }
  }
  return c;
}

}  // namespace lumen::driver
