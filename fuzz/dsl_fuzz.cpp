// libFuzzer target for the DSL front end: lexer, parser and semantic analysis
// (parse_and_check) on arbitrary bytes, plus printing of the diagnostics and
// of the AST dump. Any crash, sanitizer report, leak or hang is a bug: the
// front end must turn every input into diagnostics or a module.
//
// Build:  cmake -S . -B build-fuzz -DLUMEN_FUZZ=ON -DLUMEN_BUILD_TESTS=OFF -DCMAKE_CXX_COMPILER=clang++
//         cmake --build build-fuzz --target lumen-fuzz-dsl
// Run:    build-fuzz/fuzz/lumen-fuzz-dsl -max_total_time=300 -max_len=4096 fuzz/corpus/dsl
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lumen/dsl/frontend.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view source(reinterpret_cast<const char*>(data), size);
  lumen::DiagnosticEngine diags;
  auto module = lumen::dsl::parse_and_check("fuzz.dsl", source, diags);
  std::string printed = diags.format();
  if (module) {
    printed += lumen::dsl::ast::dump(*module);
  } else if (!diags.has_errors()) {
    __builtin_trap();  // no module must mean at least one error
  }
  return 0;
}
