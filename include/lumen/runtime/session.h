// The runtime's C++ API: a compiled model bound to a GGUF file, with its KV
// cache, arena and thread pool. eval() runs tokens (prefill in batches, or
// one token for decode) and returns the logits of the last one. Used by
// lumen-run, lumen-bench and the tests.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "lumen/gguf/gguf.h"
#include "lumen/runtime/compiled_model.h"

namespace lumen::runtime {

// Q8_0: K and V in blocks of 32 along each head's row, as llama.cpp's
// -ctk q8_0 -ctv q8_0 (its attention is llama.cpp's flash attention, kernels.h).
enum class KvType { F16, F32, Q8_0 };

// The name of each KV cache type as `--kv` spells it, indexed by the enum.
inline constexpr std::array<std::string_view, 3> kKvTypeNames = {"f16", "f32", "q8_0"};

inline std::string_view to_string(KvType type) { return kKvTypeNames[static_cast<size_t>(type)]; }

// The KV cache type named `name`, or none.
inline std::optional<KvType> parse_kv_type(std::string_view name) {
  for (size_t i = 0; i < kKvTypeNames.size(); ++i)
    if (kKvTypeNames[i] == name) return static_cast<KvType>(i);
  return std::nullopt;
}

struct SessionOptions {
  int64_t n_ctx = 0;        // KV cache positions; 0: min(4096, the model's training context)
  int64_t n_batch = 512;    // most tokens per forward pass (prefill is split into such batches)
  int n_threads = 0;        // 0: the physical cores
  KvType kv_type = KvType::F16;
  bool all_logits = false;  // keep the logits of every evaluated position (tests)
  bool profile = false;     // time every op (see profile_report)
  // Run consecutive row-local ops as one parallel_for and fold a Quantize
  // into its producer's tasks (docs/runtime.md, "Row runs and folded
  // quantizes"); false runs every op alone (a test compares the two bitwise).
  bool fuse_ops = true;
  // Packed-weight cache directory ("" = none: repack on every load); the
  // tools pass lumen::cache_dir() (common/cache.h) unless --no-pack-cache.
  std::string pack_cache_dir;
  // Map an intact cache file in place (when it lands on 2 MiB pages) rather
  // than read it into anonymous memory; false reads it (--pack-cache-read).
  bool map_pack_cache = true;
  int n_seq = 1;            // KV slots: sequences step() can advance together (each n_ctx long)
};

// One sequence's part of a step(): tokens appended to the KV slot `slot` at
// its position. all_logits keeps the logits of every token, not only the last.
// hidden keeps every token's hidden state instead (the output of the final
// norm, the output head's input: llama.cpp's result_norm) and computes no
// logits for the entry, so the output head is skipped for it (embeddings).
struct SeqTokens {
  int slot = 0;
  std::span<const int32_t> tokens;
  bool all_logits = false;
  bool hidden = false;
};

// eval() refusals that leave the session usable: context overflow, bad token ids.
struct EvalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct LoadStats {
  double load_seconds = 0;     // opening, checking and binding, packing included
  double pack_seconds = 0;     // repacking matmul weights (or reading them from the pack cache)
  std::string pack_cache = "off";  // off, hit, miss, corrupt or stale (see BoundModel)
  std::string pack_cache_how;      // on a hit: mapped or read, and why (see BoundModel)
  uint64_t packed_bytes = 0;   // size of the repacked weights
  uint64_t kv_bytes = 0;       // size of the KV cache
  uint64_t arena_bytes = 0;    // activation arena
};

class Session {
 public:
  // Maps the GGUF file, checks it against the program and binds it.
  // Throws LoadError (one line naming the culprit).
  Session(std::shared_ptr<const CompiledModel> model, const std::string& gguf_path,
          const SessionOptions& options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Evaluates tokens at positions [position(), position() + size) and returns
  // the logits of the last one (valid until the next eval). Throws EvalError
  // when the tokens do not fit the context or an id is out of range; the
  // session is then unchanged.
  std::span<const float> eval(std::span<const int32_t> tokens);
  // With options.all_logits: the logits of token i of the last eval().
  std::span<const float> logits_at(int64_t i) const;

  int64_t position() const;  // tokens in the KV cache (slot 0)
  void clear();              // forget the KV cache (slot 0 at position 0)

  // Continuous batching: runs the tokens of several sequences (distinct slots)
  // as ONE forward pass of N = their total (at most n_batch), so every matmul
  // reads its weights once for all of them (the prefill kernels when N > 1).
  // Each row's arithmetic is the same whatever else is in the pass (matmul
  // outputs and attention rows accumulate in a fixed order), so a sequence's
  // logits are bitwise those of running it alone or through eval(). Throws
  // EvalError (session unchanged) for a bad slot, a slot twice, a context
  // overflow, a bad token id, more than n_batch tokens, or hidden states
  // asked of a program without them (n_embd() == 0) or with all_logits.
  void step(std::span<const SeqTokens> batch);
  // Logits after step(): entry i of its batch, token `token` of that entry
  // (-1: the last; others need all_logits). Valid until the next step/eval.
  std::span<const float> step_logits(size_t entry, int64_t token = -1) const;
  // The hidden state (n_embd() floats) of token `token` of entry `entry` of
  // the last step(), which asked for it (SeqTokens::hidden). Bitwise what the
  // output head reads for that token (before its activation quantization),
  // whatever else was in the pass. Valid until the next step/eval.
  std::span<const float> step_hidden(size_t entry, int64_t token) const;
  // The width of a hidden state; 0 when the program's post section does not
  // start with last() and a final RMS norm, so that it has none to give.
  int64_t n_embd() const;
  int64_t position(int slot) const;
  void clear(int slot);      // frees the slot (position 0)
  // Prefix operations on KV slots (the server's prefix cache). The bytes are
  // copied exactly, so evaluating after them gives bitwise what evaluating
  // the prefix again would. A bad slot, a length beyond what the source
  // holds or a buffer of the wrong size throws std::out_of_range.
  void copy_prefix(int from, int to, int64_t n);  // slot `to` = the first n positions of `from`
  void truncate(int slot, int64_t n);             // keep the first n positions
  uint64_t kv_position_bytes() const;             // one position of one slot
  // The first n positions of `slot` into a host buffer of n * kv_position_bytes();
  // back: the first n of the positions such a buffer holds (position becomes n).
  void save_prefix(int slot, int64_t n, std::span<uint8_t> out) const;
  void restore_prefix(int slot, int64_t n, std::span<const uint8_t> in);
  int n_seq() const;
  int64_t n_batch() const;
  int64_t n_ctx() const;
  int64_t n_vocab() const;
  int n_threads() const;
  const gguf::File& gguf() const;
  const CompiledModel& model() const;
  const LoadStats& load_stats() const;
  // Time, calls and throughput per op kind and kernel (empty unless profiling).
  std::string profile_report() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lumen::runtime
