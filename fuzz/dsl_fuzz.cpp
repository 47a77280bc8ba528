// libFuzzer target for the compiler, `lumenc compile` minus the system cc:
// the compile driver from the front end through the generation of every
// matmul kernel the program names, in memory, for every target ISA (the
// schedule picks each target's kernels), the checked AST's printer and the
// Program's serialization round trip. Any crash, sanitizer report, leak, hang or
// InternalError is a bug (the driver's own checks included: a rejection
// without an error diagnostic is one): a bad program must end in a user
// error (driver::Error), as lumenc reports it.
//
// Build:  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DLUMEN_FUZZ=ON -DLUMEN_BUILD_TESTS=OFF
//         cmake --build build-fuzz --target lumen-fuzz-dsl
// Run:    build-fuzz/fuzz/lumen-fuzz-dsl -max_total_time=300 -max_len=4096 -timeout=10 fuzz/corpus/dsl
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "lumen/common/internal_error.h"
#include "lumen/driver/driver.h"
#include "lumen/dsl/ast.h"
#include "lumen/program/program.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  for (lumen::Isa isa : lumen::kAllIsas) {
    lumen::driver::Options options;
    options.stage = lumen::driver::Stage::Kernels;
    options.target = isa;
    try {
      const lumen::driver::Compilation c = lumen::driver::compile({"fuzz.dsl", source}, options);
      (void)lumen::dsl::ast::dump(*c.ast);
      const std::string text = lumen::program::serialize(*c.program);
      if (lumen::program::serialize(lumen::program::deserialize(text)) != text) __builtin_trap();
      for (const auto& entry : c.kernels)
        if (entry.second.empty()) __builtin_trap();
    } catch (const lumen::InternalError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      __builtin_trap();  // a broken invariant, never the program's fault
    } catch (const lumen::driver::Error&) {
      return 0;  // a user error, reported as lumenc reports it (the same for every target)
    }
  }
  return 0;
}
