// lumen-bench: llama-bench's pp and tg tests on a compiled model, with a
// ceiling beside each row: tg against the probed read bandwidth, pp against
// the probed int8 dot-product peak of the model's target ISA. The model
// column names the file type; the `weights:` line the matmul weights' types
// and the formats the binding packs them in; the peak RSS leaves out the
// bandwidth probe's buffer.
//
// Semantics follow llama-bench: pp<N> is one prompt of N random tokens
// evaluated as one batch (logits for the last token only); tg<N> is N
// single-token evaluations with no prompt; one warm-up run per test; each
// repetition clears the KV cache; the figure is the mean ± sample standard
// deviation of the per-repetition tokens/s. --draft K: verify<K> is N
// speculative verify passes of one sequence (its pending token and K drafts,
// every row's logits), each advancing it by one position; its cost is given
// against a decode step measured right before it (alternated repetitions).
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/model_for_gguf.h"
#include "cli/session_flags.h"
#include "lumen/common/internal_error.h"
#include "lumen/target/int8_peak.h"
#include "lumen/target/membw.h"
#include "lumen/target/weight_formats.h"
#include "lumen/gguf/gguf.h"
#include "lumen/program/program.h"
#include "lumen/quant/file_types.h"
#include "lumen/runtime/compiled_model.h"
#include "lumen/runtime/session.h"

namespace {

using lumen::runtime::Session;
using Clock = std::chrono::steady_clock;

struct Row {
  std::string test;       // "pp512", "tg128"
  int64_t n_prompt = 0, n_gen = 0;
  int threads = 0;
  std::vector<double> samples_ts;
  double mean = 0, sd = 0;
  double bandwidth_gbs = 0;     // measured read bandwidth at this thread count
  double bytes_per_token = 0;   // tg: weight bytes read per token
  double ceiling_ts = 0;        // tg: bandwidth / bytes per token
  int64_t n_draft = 0;          // verify: drafted tokens per pass
  double step_ratio = 0;        // verify: a pass's time over a decode step's
  double gops = 0;              // pp: matmul GOP/s
  double int8_peak_gops = 0;    // pp: probed int8 dot-product peak of the target ISA at this thread count
  // Share of the row's own ceiling: tg of the bandwidth roofline, pp of the int8 peak.
  double ceiling_pct() const {
    if (n_gen) return ceiling_ts > 0 ? 100.0 * mean / ceiling_ts : 0.0;
    return int8_peak_gops > 0 ? 100.0 * gops / int8_peak_gops : 0.0;
  }
};

void mean_sd(Row& r) {
  const double n = double(r.samples_ts.size());
  for (double v : r.samples_ts) r.mean += v / n;
  for (double v : r.samples_ts) r.sd += (v - r.mean) * (v - r.mean);
  r.sd = r.samples_ts.size() > 1 ? std::sqrt(r.sd / (n - 1)) : 0.0;
}

// The tensors the program's matmuls read, each once (a tied head is the
// embedding table), and whether it runs for the last token only (the post
// section, after last()).
struct MatmulWeight {
  const lumen::gguf::TensorInfo* tensor;
  bool last_only;
  lumen::ops::DType input;  // its matmul's input (act_q8, or f32 for float weights)
};

std::vector<MatmulWeight> matmul_weights(const Session& s) {
  const auto& prog = s.model().program;
  const auto& g = s.gguf();
  std::vector<MatmulWeight> out;
  std::set<const lumen::gguf::TensorInfo*> seen;
  lumen::ops::DType input = lumen::ops::DType::ActQ8;
  auto add = [&](const lumen::gguf::TensorInfo* t, bool last_only) {
    if (t != nullptr && seen.insert(t).second) out.push_back(MatmulWeight{t, last_only, input});
  };
  for (const auto* ops : {&prog.pre, &prog.layer, &prog.post})
    for (const auto& op : *ops) {
      if (op.kind != lumen::ops::OpId::MatMul) continue;
      input = op.inputs.empty() || op.inputs[0].buffer < 0 ? lumen::ops::DType::ActQ8
                                                           : prog.buffers[size_t(op.inputs[0].buffer)].dtype;
      for (int wi : op.weights) {
        const auto& w = prog.weights[size_t(wi)];
        if (!w.per_layer) {
          const auto* t = g.find_tensor(w.gguf_name);
          add(t != nullptr ? t : g.find_tensor(w.fallback), ops == &prog.post);
          continue;
        }
        for (int64_t layer = 0;; ++layer) {
          const auto* t = g.find_tensor(lumen::program::layer_tensor_name(w.gguf_name, layer));
          if (t == nullptr) break;
          add(t, ops == &prog.post);
        }
      }
    }
  return out;
}

// The embedding table the program looks rows up in (null if none).
const lumen::gguf::TensorInfo* embedding_table(const Session& s) {
  const auto& prog = s.model().program;
  for (const auto& op : prog.pre)
    if (op.kind == lumen::ops::OpId::Embed && !op.weights.empty()) {
      const auto& w = prog.weights[size_t(op.weights[0])];
      const auto* t = s.gguf().find_tensor(w.gguf_name);
      return t != nullptr ? t : s.gguf().find_tensor(w.fallback);
    }
  return nullptr;
}

// Bytes a decode step of tg<n_gen> streams on average: the matmul weights as
// the binding packed them (LoadStats::packed_bytes: whatever formats they run
// in, not the file's), every other tensor but the embedding table (norms,
// biases), one row of that table, and the KV cache of the (n_gen + 1) / 2
// positions a step attends on average.
double decode_bytes_per_token(const Session& s, const std::vector<MatmulWeight>& matmuls, int64_t n_gen) {
  double bytes = double(s.load_stats().packed_bytes);
  std::set<const lumen::gguf::TensorInfo*> skip;
  for (const MatmulWeight& m : matmuls) skip.insert(m.tensor);
  const auto* embedding = embedding_table(s);
  if (embedding != nullptr) {
    skip.insert(embedding);
    if (embedding->ne.size() >= 2 && embedding->ne[1] > 0)
      bytes += double(embedding->n_bytes) / double(embedding->ne[1]);
  }
  for (const auto& t : s.gguf().tensors())
    if (skip.count(&t) == 0) bytes += double(t.n_bytes);
  return bytes + double(s.kv_position_bytes()) * double(n_gen + 1) / 2.0;
}

// Multiply-adds of the matmuls for a prompt of n_prompt tokens: every
// weight per token, but those after last() (the output head) once.
double matmul_ops(const std::vector<MatmulWeight>& matmuls, int64_t n_prompt) {
  double per_token = 0, once = 0;
  for (const MatmulWeight& m : matmuls) (m.last_only ? once : per_token) += double(m.tensor->n_elements);
  return 2.0 * (per_token * double(n_prompt) + once);
}

// The file type general.file_type names, as llama-quantize spells it ("Q4_K_M").
std::string file_type_name(const lumen::gguf::File& g) {
  std::optional<uint64_t> id;
  try {
    id = g.get_uint("general.file_type");
  } catch (const lumen::gguf::Error&) {  // a label only: the file runs without it
    return "general.file_type not an integer";
  }
  if (!id) return "no general.file_type";
  for (const auto& ft : lumen::quant::kFileTypes)
    if (uint64_t(ft.id) == *id) return ft.name;
  return fmt::format("file type {}", *id);
}

// "133 Q5_0 + 24 Q8_0 + ...": how many of `types` there are of each, most first.
std::string type_counts(const std::vector<lumen::ops::DType>& types) {
  std::map<lumen::ops::DType, int> counts;
  for (lumen::ops::DType t : types) ++counts[t];
  std::vector<std::pair<int, lumen::ops::DType>> order;
  for (const auto& [t, n] : counts) order.emplace_back(-n, t);
  std::sort(order.begin(), order.end());
  std::string out;
  for (const auto& [n, t] : order) out += fmt::format("{}{} {}", out.empty() ? "" : " + ", -n, lumen::ops::id_name(t));
  return out;
}

// Peak RSS of loading and running the model, without the bandwidth probe's
// buffer (1 GiB, more than a small model's weights): VmHWM is read before
// each probe and reset after it (/proc/self/clear_refs "5"). Where it cannot
// be reset, the figure includes the probes and says so.
class PeakRss {
 public:
  void before_probe() { peak_kib_ = std::max(peak_kib_, hwm_kib()); }
  void after_probe() {
    std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
    const bool reset = f != nullptr && std::fputs("5", f) >= 0;
    if (f != nullptr) reset_all_ &= std::fclose(f) == 0 && reset;
    else reset_all_ = false;
  }
  double mib() const { return double(std::max(peak_kib_, hwm_kib())) / 1024.0; }
  bool includes_probes() const { return !reset_all_; }

 private:
  static long hwm_kib() {
    std::FILE* f = std::fopen("/proc/self/status", "r");
    long kib = -1;
    char line[256];
    while (f != nullptr && kib < 0 && std::fgets(line, sizeof line, f)) std::sscanf(line, "VmHWM: %ld kB", &kib);
    if (f != nullptr) std::fclose(f);
    if (kib >= 0) return kib;
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
  }
  long peak_kib_ = 0;
  bool reset_all_ = true;
};

std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int64_t n_vocab) {
  std::uniform_int_distribution<int32_t> dist(0, int32_t(n_vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = dist(rng);
  return t;
}

double run_pp(Session& s, const std::vector<int32_t>& tokens) {
  s.clear();
  const auto t0 = Clock::now();
  s.eval(tokens);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// n verify passes of 1 + k rows, each keeping one position (all drafts rejected).
double run_verify(Session& s, std::mt19937& rng, int64_t k, int64_t n) {
  s.clear();
  std::uniform_int_distribution<int32_t> dist(0, int32_t(s.n_vocab() - 1));
  std::vector<int32_t> rows(static_cast<size_t>(1 + k));
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    for (auto& t : rows) t = dist(rng);
    const lumen::runtime::SeqTokens entry{0, rows, true};
    s.step(std::span<const lumen::runtime::SeqTokens>(&entry, 1));
    s.truncate(0, i + 1);
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double run_tg(Session& s, std::mt19937& rng, int64_t n) {
  s.clear();
  std::uniform_int_distribution<int32_t> dist(0, int32_t(s.n_vocab() - 1));
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t tok = dist(rng);
    s.eval(std::span<const int32_t>(&tok, 1));
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::vector<int64_t> parse_list(const std::string& s, const char* what) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 0)
      throw CLI::ValidationError(what, "expects a comma-separated list of counts, got '" + s + "'");
    out.push_back(v);
    pos = comma + 1;
  }
  return out;
}

std::string human_size(double bytes) {
  return bytes >= 1024.0 * 1024 * 1024 ? fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024))
                                       : fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "lumen-bench: llama-bench's prompt-processing (pp) and text-generation (tg) tests on a\n"
      "compiled model, with the machine's read bandwidth and the roofline beside each row.\n"
      "Example: lumen-bench model.so --gguf model.gguf -p 128,512 -n 128 -t 1,2 -r 5\n"
      "Without model.so, the program of the file's architecture is compiled for its tensor types.",
      "lumen-bench"};
  std::string so_path, p_list = "512", n_list = "128", d_list = "0", format = "md";
  int reps = 5;
  bool profile = false;
  lumen::cli::SessionFlags flags;
  std::optional<std::string> dsl_dir;
  app.add_option("model", so_path, "model.so written by `lumenc compile` (default: compile for --gguf)");
  app.add_option("--dsl-dir", dsl_dir, "folder of model programs (default: LUMEN_DSL_DIR, else the installed dsl/)");
  lumen::cli::add_session_flags(app, flags, {.ctx_and_batch = false, .thread_list = true});
  app.add_option("-p,--n-prompt", p_list, "prompt sizes (comma-separated; 0 to skip)");
  app.add_option("-n,--n-gen", n_list, "generation lengths (comma-separated; 0 to skip)");
  app.add_option("--draft", d_list,
                 "verify passes of K drafted tokens to time against a decode step (comma-separated; 0 to skip)");
  app.add_option("-r,--repetitions", reps, "repetitions per test")->check(CLI::Range(1, 1000));
  app.add_option("-o,--output", format, "output format")->check(CLI::IsMember({"md", "json"}));
  app.add_flag("--profile", profile, "after the table, profile one pp and one tg run per op and kernel");
  if (auto exit_code = lumen::cli::parse_command_line(app, argc, argv)) return *exit_code;

  return lumen::run_tool("lumen-bench", [&] {
    try {
      const auto prompts = parse_list(p_list, "-p");
      const auto gens = parse_list(n_list, "-n");
      const auto drafts = parse_list(d_list, "--draft");
      std::vector<int> threads = flags.threads;

      const std::string& gguf_path = flags.gguf_path;
      if (so_path.empty()) so_path = lumen::cli::model_for_gguf(gguf_path, dsl_dir, "lumen-bench");
      auto model = std::make_shared<const lumen::runtime::CompiledModel>(lumen::runtime::load_model_so(so_path));
      const int64_t max_p = std::max<int64_t>(1, *std::max_element(prompts.begin(), prompts.end()));
      const int64_t max_n = *std::max_element(gens.begin(), gens.end());

      std::vector<Row> rows;
      std::mt19937 rng(1234);
      std::string model_desc, model_size, params;
      std::string weights;  // the file type, its matmul weights' types and what they run as
      PeakRss peak_rss;
      auto probe_bandwidth = [&](int nt, int repeats) {
        peak_rss.before_probe();
        const double gbs = lumen::measure_read_bandwidth(size_t(1) << 30, nt, repeats);
        peak_rss.after_probe();
        return gbs;
      };
      double load_s = 0, pack_s = 0;  // of the first session: what a user waits before the first token
      std::string pack_cache;         // its pack cache status: off, miss, ..., or hit and whether mapped or read
      if (threads.empty()) threads.push_back(0);
      for (int t : threads) {
        lumen::runtime::SessionOptions opt = flags.session_options(t);
        const int64_t max_d = *std::max_element(drafts.begin(), drafts.end());
        opt.n_batch = std::max(max_p, 1 + max_d);
        opt.n_ctx = ((max_p + max_n + max_d + 31) / 32) * 32;  // as llama-bench: prompt + generation, padded to 32
        Session s(model, gguf_path, opt);
        const int nt = s.n_threads();
        const double bw = probe_bandwidth(nt, 5);
        const std::vector<MatmulWeight> matmuls = matmul_weights(s);
        if (model_desc.empty()) {
          double n_params = 0, bytes = 0;
          for (const auto& ti : s.gguf().tensors()) {
            n_params += double(ti.n_elements);
            bytes += double(ti.n_bytes);
          }
          model_desc = model->program.arch + " " + file_type_name(s.gguf());
          std::vector<lumen::ops::DType> types, formats;
          for (const MatmulWeight& m : matmuls) {
            const std::optional<lumen::ops::DType> t = lumen::ops::dtype_of_ggml(uint32_t(m.tensor->type));
            if (!t) continue;  // the binding refused such a file already
            types.push_back(*t);
            formats.push_back(lumen::packed_format(*t, model->isa, m.input));
          }
          weights = fmt::format("{} file; matmul weights {}, packed as {} ({})", file_type_name(s.gguf()),
                                type_counts(types), type_counts(formats),
                                human_size(double(s.load_stats().packed_bytes)));
          model_size = human_size(bytes);
          params = n_params >= 1e9 ? fmt::format("{:.2f} B", n_params / 1e9) : fmt::format("{:.2f} M", n_params / 1e6);
          load_s = s.load_stats().load_seconds;
          pack_s = s.load_stats().pack_seconds;
          const auto& ls = s.load_stats();
          pack_cache = ls.pack_cache + (ls.pack_cache_how.empty() ? "" : ", " + ls.pack_cache_how);
          std::fprintf(stderr, "lumen-bench: load %.2f s (pack %.2f s, %s packed, pack cache %s), target %s\n", load_s,
                       pack_s, human_size(double(ls.packed_bytes)).c_str(), pack_cache.c_str(), model->target.c_str());
        }
        for (int64_t p : prompts) {
          if (p == 0) continue;
          Row r;
          r.test = fmt::format("pp{}", p);
          r.n_prompt = p;
          r.threads = nt;
          const auto tokens = random_tokens(rng, p, s.n_vocab());
          run_pp(s, tokens);  // warm-up
          // The compute ceiling, probed around the repetitions (a peak: the best probe).
          r.int8_peak_gops = lumen::measure_int8_peak(model->isa, nt);
          for (int i = 0; i < reps; ++i) r.samples_ts.push_back(double(p) / run_pp(s, tokens));
          r.int8_peak_gops = std::max(r.int8_peak_gops, lumen::measure_int8_peak(model->isa, nt));
          mean_sd(r);
          r.bandwidth_gbs = bw;
          r.gops = matmul_ops(matmuls, p) * r.mean / double(p) / 1e9;
          rows.push_back(r);
        }
        for (int64_t n : gens) {
          if (n == 0) continue;
          Row r;
          r.test = fmt::format("tg{}", n);
          r.n_gen = n;
          r.threads = nt;
          run_tg(s, rng, 1);  // warm-up
          // The ceiling is probed right before every repetition: on a shared
          // host the bandwidth drifts within seconds, and a probe taken before
          // the pp rows may describe another moment.
          double bw_sum = 0;
          for (int i = 0; i < reps; ++i) {
            bw_sum += probe_bandwidth(nt, 3);
            r.samples_ts.push_back(double(n) / run_tg(s, rng, n));
          }
          mean_sd(r);
          r.bandwidth_gbs = bw_sum / reps;
          r.bytes_per_token = decode_bytes_per_token(s, matmuls, n);
          r.ceiling_ts = r.bandwidth_gbs * 1e9 / r.bytes_per_token;
          rows.push_back(r);
        }
        for (int64_t k : drafts) {
          if (k == 0 || max_n == 0) continue;
          Row r;
          r.test = fmt::format("verify{}", k);
          r.n_draft = k;
          r.threads = nt;
          run_verify(s, rng, k, 1);  // warm-up
          double ratio_sum = 0;
          for (int i = 0; i < reps; ++i) {
            const double step = run_tg(s, rng, max_n), pass = run_verify(s, rng, k, max_n);
            ratio_sum += pass / step;
            r.samples_ts.push_back(double(max_n) / pass);
          }
          mean_sd(r);
          r.step_ratio = ratio_sum / reps;
          rows.push_back(r);
        }
      }

      const double peak_rss_mib = peak_rss.mib();
      if (format == "json") {
        std::printf("[\n");
        for (size_t i = 0; i < rows.size(); ++i) {
          const Row& r = rows[i];
          std::string samples;
          for (size_t j = 0; j < r.samples_ts.size(); ++j)
            samples += fmt::format("{}{:.4f}", j ? ", " : "", r.samples_ts[j]);
          std::printf(
              "  {\"model\": \"%s\", \"target\": \"%s\", \"test\": \"%s\", \"n_prompt\": %lld, \"n_gen\": %lld, "
              "\"threads\": %d, \"avg_ts\": %.4f, \"stddev_ts\": %.4f, \"samples_ts\": [%s], "
              "\"bandwidth_gbs\": %.3f, \"bytes_per_token\": %.0f, \"ceiling_ts\": %.4f, \"gops\": %.3f, "
              "\"int8_peak_gops\": %.3f, \"ceiling_pct\": %.2f, \"load_s\": %.3f, \"pack_s\": %.3f, "
              "\"pack_cache_mapped\": %s, \"peak_rss_mib\": %.1f, \"peak_rss_includes_probes\": %s, "
              "\"weights\": \"%s\", \"n_draft\": %lld, \"decode_step_ratio\": %.4f}%s\n",
              model_desc.c_str(), model->target.c_str(), r.test.c_str(), (long long)r.n_prompt, (long long)r.n_gen,
              r.threads, r.mean, r.sd, samples.c_str(), r.bandwidth_gbs, r.bytes_per_token, r.ceiling_ts, r.gops,
              r.int8_peak_gops, r.ceiling_pct(), load_s, pack_s,
              pack_cache.rfind("hit, mapped", 0) == 0 ? "true" : "false", peak_rss_mib,
              peak_rss.includes_probes() ? "true" : "false", weights.c_str(),
              (long long)r.n_draft, r.step_ratio, i + 1 < rows.size() ? "," : "");
        }
        std::printf("]\n");
      } else {
        std::printf("| model | size | params | backend | threads | test | t/s | read GB/s | roofline |\n");
        std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
        for (const Row& r : rows) {
          const std::string roof =
              r.n_draft ? fmt::format("1 + {} rows per pass: {:.2f}x a decode step", r.n_draft, r.step_ratio)
              : r.n_gen ? fmt::format("{:.1f} MB/tok streamed, ceiling {:.2f} t/s, {:.0f}%", r.bytes_per_token / 1e6,
                                    r.ceiling_ts, r.ceiling_pct())
                      : fmt::format("{:.1f} GOP/s, int8 peak {:.0f} GOP/s, {:.0f}%", r.gops, r.int8_peak_gops,
                                    r.ceiling_pct());
          std::printf("| %s | %s | %s | lumen %s | %d | %s | %.2f ± %.2f | %.1f | %s |\n", model_desc.c_str(),
                      model_size.c_str(), params.c_str(), model->target.c_str(), r.threads, r.test.c_str(), r.mean,
                      r.sd, r.bandwidth_gbs, roof.c_str());
        }
        std::printf("\nweights: %s\n", weights.c_str());
        std::printf("tg roofline: the bytes a decode step streams (the packed matmul weights, the other tensors, "
                    "one embedding row, the KV cache a step attends on average) at the read GB/s\n");
        std::printf("load %.2f s (pack %.2f s, pack cache %s), peak RSS %.1f MiB%s\n", load_s, pack_s,
                    pack_cache.c_str(), peak_rss_mib,
                    peak_rss.includes_probes() ? " (the bandwidth probes' buffer included)" : "");
      }

      if (profile) {
        lumen::runtime::SessionOptions opt = flags.session_options(threads.front());
        opt.n_batch = max_p;
        opt.n_ctx = ((max_p + std::max<int64_t>(max_n, 1) + 31) / 32) * 32;
        opt.profile = true;
        Session s(model, gguf_path, opt);
        run_pp(s, random_tokens(rng, max_p, s.n_vocab()));
        std::fprintf(stderr, "\nprofile: pp%lld, %d threads\n%s", (long long)max_p, s.n_threads(),
                     s.profile_report().c_str());
        if (max_n > 0) {
          Session g(model, gguf_path, opt);
          run_tg(g, rng, max_n);
          std::fprintf(stderr, "\nprofile: tg%lld, %d threads\n%s", (long long)max_n, g.n_threads(),
                       g.profile_report().c_str());
        }
      }
    } catch (const CLI::ValidationError& e) {  // a bad -p/-n list: bad usage
      std::fprintf(stderr, "lumen-bench: error: %s\n", e.what());
      return 2;
    }
    return 0;
  });
}
