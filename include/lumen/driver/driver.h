// The compile driver: the one path from a model program to what a tool wants
// of it (the checked AST, the IR after any pass, the scheduled program, the
// kernels, model.so), as Halide's lower() is for Halide. The source is read
// once and every stage reports into one DiagnosticEngine. lumenc, lumen-run,
// the tests and the fuzzer all compile through compile();
// model_for_architecture() adds the folder of programs and the compiled-model
// cache for the tools that start from a GGUF file.
//
// Errors: a problem in the user's input throws Error (a DSL program's
// diagnostics, with file:line:col, plus one line); a broken promise between
// stages throws InternalError. A DSL program the front end accepts is never
// refused later without a location: what a pass cannot handle in it is a
// diagnostic at the line of the op at fault.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/common/diagnostics.h"
#include "lumen/dsl/ast.h"
#include "lumen/ir/ir.h"
#include "lumen/passes/passes.h"
#include "lumen/program/program.h"
#include "lumen/target/cpu_tune.h"
#include "lumen/target/isa.h"

namespace lumen::driver {

// A user error. what() is one line ("2 error(s) in 'x.dsl'", "cannot read
// 'x.dsl'", ...); `diagnostics` holds the formatted diagnostics behind it, to
// print first ("" when there are none).
struct Error : std::runtime_error {
  explicit Error(const std::string& message, std::string diagnostics = "");
  std::string diagnostics;
};

// A model program: a DSL program, or the IR text form when the name ends in
// ".ir" (golden tests, `lumenc dump-ir --only`).
struct Source {
  std::string file;  // the name diagnostics show
  std::string text;
  static Source read(const std::string& path);  // Error "cannot read 'PATH'"
  bool is_ir() const;
};

// The type of every tensor of one GGUF file, by tensor name: what a program
// is compiled for. The tools read it from the file (the compiler never reads
// GGUF); compile() binds each weight declaration to it, per layer.
using WeightTypes = std::map<std::string, ops::DType, std::less<>>;

// How far compile() goes; each stage includes the ones before it.
enum class Stage : uint8_t {
  Ir,       // the IR: lowered, then the passes up to Options::stop_after
  Program,  // the scheduled program: everything that can refuse a program (`lumenc check`)
  Kernels,  // the machine code of every kernel the program names, in memory (no toolchain)
  ModelSo,  // model.so at Options::output (its kernels go into the file, not Compilation::kernels)
};

struct Options {
  Stage stage = Stage::Program;
  Isa target = Isa::Avx2;  // the kernels' ISA (lumenc's `native` is best_isa(cpu_features()))
  CpuTune tune = CpuTune::Generic;  // what they are tuned for beyond it (lumenc's `native`: host_cpu_tune())
  // Stage::Ir: "lower" stops before the first pass, a pass name after it, "" runs them all.
  std::string stop_after;
  // Stage::Ir: run just this pass on the source's IR instead of the pipeline
  // (a source that is not fully typed may only take infer_shapes).
  std::string only_pass;
  // Sees the IR after each pass of the pipeline (`lumenc dump-ir --after=all`).
  std::function<void(const passes::PassInfo&, const ir::Module&)> after_each;
  std::string output;  // Stage::ModelSo: the file to write
  // The file's tensor types the program is compiled for. Empty: every `any`
  // weight is Q8_0 (and an IR source keeps the types it states).
  WeightTypes weight_types;
};

struct Compilation {
  DiagnosticEngine diags;                   // warnings (errors throw Error)
  std::unique_ptr<dsl::ast::Module> ast;    // the checked AST of a DSL source
  std::optional<ir::Module> ir;             // the IR where the passes stopped
  std::optional<program::Program> program;  // Stage::Program and after
  std::map<std::string, std::vector<uint8_t>> kernels;  // Stage::Kernels: code by kernel name
};

// Runs `source` through the compiler as far as options.stage.
Compilation compile(const Source& source, const Options& options);

// Binds every weight declaration of `m` to its tensors' types in `types`
// (each layer's tensor, or its fallback: a tied head takes the embedding's
// type), or to Q8_0 for `any` when `types` is empty. Error naming the tensor
// when the file lacks a required one or holds another type than a fixed one.
void bind_weight_types(ir::Module& m, const WeightTypes& types);

// ------------------------------------------------ programs for GGUF files

// The folder of model programs: `override` when given, else LUMEN_DSL_DIR,
// else the installed one (share/lumen/dsl), else the source tree's dsl/.
std::string dsl_folder(const std::optional<std::string>& override = std::nullopt);

// The program of `folder` whose `model` line names `arch` (the first by file
// name); Error naming the architectures the folder describes when none does.
Source find_program(const std::string& folder, const std::string& arch);

struct CachedModel {
  std::string path;       // model.so
  std::string program;    // the program it was compiled from
  bool compiled = false;  // compiled by this call (else found in the cache)
  std::string warnings;   // the compile's diagnostics, formatted (when compiled)
};

// model.so for the program of `arch` in `folder`, compiled for `target`,
// `tune` and the file's tensor types `types`: from the compiled-model cache
// (common/cache.h's folder, keyed with its hash by the program text, the
// target, the tuning, the types and the compiler, i.e. the bytes of this
// executable), else compiled into it now. Concurrent callers never see half a file.
CachedModel model_for_architecture(const std::string& arch, Isa target, CpuTune tune, const std::string& folder,
                                   const WeightTypes& types);

// The key of the compiled-model cache for a program text, target, tuning and tensor types.
uint64_t model_cache_key(std::string_view program_text, Isa target, CpuTune tune, const WeightTypes& types);

}  // namespace lumen::driver
