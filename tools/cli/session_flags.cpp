// The shared Session flags (see session_flags.h). Each flag's range is stated
// here and nowhere else.
#include "cli/session_flags.h"

#include <string>
#include <vector>

#include "lumen/common/cache.h"

namespace lumen::cli {

namespace {

constexpr int kMaxThreads = 1024;
constexpr int64_t kMaxCtx = int64_t{1} << 30;
constexpr int64_t kMaxBatch = int64_t{1} << 20;

}  // namespace

runtime::SessionOptions SessionFlags::session_options(int n_threads) const {
  runtime::SessionOptions o;
  o.n_ctx = n_ctx;
  o.n_batch = n_batch;
  o.n_threads = n_threads;
  o.kv_type = kv_type;
  if (!no_pack_cache) o.pack_cache_dir = cache_dir();
  o.map_pack_cache = !pack_cache_read;
  return o;
}

void add_session_flags(CLI::App& app, SessionFlags& flags, SessionFlagSet set) {
  app.add_option("-m,--gguf", flags.gguf_path, "GGUF file with the weights and the tokenizer")->required();
  if (set.ctx_and_batch) {
    app.add_option("-c,--ctx,--ctx-size", flags.n_ctx,
                   "context size in tokens, of each sequence in lumen-server (default min(4096, the model's "
                   "training context); above the training context is an error)")
        ->check(CLI::Range(int64_t{1}, kMaxCtx));
    app.add_option("-b,--batch,--batch-size", flags.n_batch,
                   "most tokens per forward pass (default " + std::to_string(flags.n_batch) + ")")
        ->check(CLI::Range(int64_t{1}, kMaxBatch));
  }
  auto* threads = app.add_option("-t,--threads", flags.threads,
                                 set.thread_list ? "thread counts (comma-separated; default: the physical cores)"
                                                 : "threads (default: the physical cores)");
  threads->check(CLI::Range(1, kMaxThreads));
  if (set.thread_list)
    threads->delimiter(',')->allow_extra_args(false);
  else
    threads->expected(1);
  const std::vector<std::string> kv_names(runtime::kKvTypeNames.begin(), runtime::kKvTypeNames.end());
  std::string kv_help = "KV cache type:";
  for (size_t i = 0; i < kv_names.size(); ++i) kv_help += (i ? ", " : " ") + kv_names[i];
  kv_help += " (default " + std::string(runtime::to_string(flags.kv_type)) + ", as llama.cpp)";
  app.add_option_function<std::string>(
         "--kv",
         // The check admits only the names, so the type exists.
         [&flags](const std::string& name) { flags.kv_type = *runtime::parse_kv_type(name); }, kv_help)
      ->check(CLI::IsMember(kv_names));
  app.add_flag("--no-pack-cache", flags.no_pack_cache,
               "repack the weights instead of using the packed-weight cache (LUMEN_CACHE_DIR, else "
               "$XDG_CACHE_HOME/lumen or ~/.cache/lumen)");
  app.add_flag("--pack-cache-read", flags.pack_cache_read,
               "read the packed-weight cache into memory instead of mapping the file in place");
}

}  // namespace lumen::cli
