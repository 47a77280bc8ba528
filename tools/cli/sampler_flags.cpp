// The sampler flags (see sampler_flags.h), derived from kSamplerParams.
#include "cli/sampler_flags.h"

#include <fmt/format.h>

#include <string>
#include <type_traits>
#include <variant>

namespace lumen::cli {

void add_sampler_flags(CLI::App& app, SamplerParams& params) {
  for (const SamplerParam& p : kSamplerParams) {
    const std::string flags(p.flags), help(p.help);
    std::visit(
        [&](const auto& v) {
          using Kind = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<Kind, RealSamplerParam>) {
            app.add_option_function<double>(
                   flags, [&params, member = v.member](double x) { params.*member = static_cast<float>(x); },
                   fmt::format("{} (default {})", help, params.*v.member))
                ->check(CLI::Range(v.lo, v.hi));
          } else {
            app.add_option_function<int64_t>(
                   flags, [&params, set = v.set](int64_t x) { set(params, x); },
                   fmt::format("{} (default {})", help, v.get(params)))
                ->check(CLI::Range(v.lo, v.hi));
          }
        },
        p.value);
  }
}

}  // namespace lumen::cli
