// libFuzzer target for the compiler, `lumenc compile` minus the system cc:
// front end (parse_and_check), lowering to the IR, the verifier, every pass,
// lower_to_program, the Program's serialization round trip, and generation of
// every matmul kernel the program names for each ISA, in memory. Any crash,
// sanitizer report, leak, hang or InternalError is a bug: a bad program must
// end in diagnostics or in a user error (std::exception), as lumenc reports
// it. Also a bug: the front end returning no module without an error.
//
// Build:  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DLUMEN_FUZZ=ON -DLUMEN_BUILD_TESTS=OFF
//         cmake --build build-fuzz --target lumen-fuzz-dsl
// Run:    build-fuzz/fuzz/lumen-fuzz-dsl -max_total_time=300 -max_len=4096 -timeout=10 fuzz/corpus/dsl
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string_view>

#include "lumen/codegen/codegen.h"
#include "lumen/common/internal_error.h"
#include "lumen/dsl/frontend.h"
#include "lumen/ir/lower_ast.h"
#include "lumen/ir/verifier.h"
#include "lumen/passes/passes.h"
#include "lumen/program/program.h"

namespace {

// The back end on an accepted program; user errors end it quietly.
void compile(const lumen::dsl::ast::Module& ast, std::string_view source) {
  lumen::DiagnosticEngine diags;
  diags.add_source("fuzz.dsl", std::string(source));
  auto lowered = lumen::ir::lower_ast(ast, diags);
  (void)diags.format();
  if (!lowered) {
    if (!diags.has_errors()) __builtin_trap();  // refused without saying why
    return;
  }
  lumen::ir::Module& m = *lowered;
  if (!lumen::ir::verify(m, /*require_types=*/false).empty()) return;
  // The schedule picks the kernels per target: every target's must generate.
  for (lumen::Isa isa : lumen::kAllIsas) {
    lumen::ir::Module scheduled = m;
    lumen::passes::run_pipeline(scheduled, isa);
    const lumen::program::Program program = lumen::passes::lower_to_program(scheduled);
    const lumen::program::Program back = lumen::program::deserialize(lumen::program::serialize(program));
    if (lumen::program::serialize(back) != lumen::program::serialize(program)) __builtin_trap();
    std::set<lumen::program::KernelId> done;
    for (const auto* ops : {&program.pre, &program.layer, &program.post})
      for (const lumen::program::Op& op : *ops) {
        if (op.kind != lumen::ops::OpId::MatMul) continue;
        for (const lumen::program::KernelId& kernel : op.schedule.kernels())
          if (done.insert(kernel).second && lumen::codegen::generate_matmul_kernel(isa, kernel).empty())
            __builtin_trap();
      }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view source(reinterpret_cast<const char*>(data), size);
  lumen::DiagnosticEngine diags;
  auto module = lumen::dsl::parse_and_check("fuzz.dsl", source, diags);
  std::string printed = diags.format();
  if (!module) {
    if (!diags.has_errors()) __builtin_trap();  // no module must mean at least one error
    return 0;
  }
  printed += lumen::dsl::ast::dump(*module);
  try {
    compile(*module, source);
  } catch (const lumen::InternalError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    __builtin_trap();  // a broken invariant, never the program's fault
  } catch (const std::exception&) {
    // A user error, reported as lumenc reports it.
  }
  return 0;
}
