// The command-line flags of every tool that opens a runtime Session
// (lumen-run, lumen-bench, lumen-server), declared once with one range each:
// the GGUF, the context and batch sizes, the threads, the KV cache type and
// the packed-weight cache, under llama.cpp's spellings too (-m, -c, -b, -t).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "lumen/runtime/session.h"

namespace lumen::cli {

struct SessionFlags {
  std::string gguf_path;
  int64_t n_ctx = runtime::SessionOptions{}.n_ctx;
  int64_t n_batch = runtime::SessionOptions{}.n_batch;
  std::vector<int> threads;  // empty: the physical cores; one count except in lumen-bench
  runtime::KvType kv_type = runtime::SessionOptions{}.kv_type;
  bool no_pack_cache = false, pack_cache_read = false;

  // The Session options these flags say, with `n_threads` threads (0: the
  // physical cores) and the packed-weight cache unless --no-pack-cache.
  runtime::SessionOptions session_options(int n_threads) const;
  // The one thread count of lumen-run and lumen-server (0: the physical cores).
  int n_threads() const { return threads.empty() ? 0 : threads.front(); }
};

// Which of the flags a tool takes. lumen-bench sizes the context and the
// batch from its tests and takes a comma-separated list of thread counts, as
// llama-bench does.
struct SessionFlagSet {
  bool ctx_and_batch = true;
  bool thread_list = false;
};

// Adds the flags to `app`, storing into `flags` (which must outlive the parse).
void add_session_flags(CLI::App& app, SessionFlags& flags, SessionFlagSet set = {});

}  // namespace lumen::cli
