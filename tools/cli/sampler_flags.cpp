// The sampler flags (see sampler_flags.h), derived from kSamplerParams.
#include "cli/sampler_flags.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
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
  app.add_option_function<std::vector<std::string>>(
         "-l,--logit-bias",
         [&params](const std::vector<std::string>& values) {
           // The check admitted each value, so each parses.
           for (const std::string& v : values) params.logit_bias.push_back(*parse_logit_bias_flag(v));
         },
         fmt::format("TOKEN_ID(+|-)BIAS: add BIAS (at most {}) to the token's logit before sampling, e.g. "
                     "15043+1; TOKEN_ID-inf bans the token (repeatable)",
                     kMaxLogitBias))
      ->check(CLI::Validator(
          [](const std::string& v) {
            return parse_logit_bias_flag(v) ? std::string()
                                            : "'" + v + "' is not TOKEN_ID(+|-)BIAS with |BIAS| <= " +
                                                  fmt::format("{}", kMaxLogitBias) + " or -inf";
          },
          "TOKEN_ID(+|-)BIAS"));
}

std::optional<LogitBias> parse_logit_bias_flag(std::string_view text) {
  const size_t sign = text.find_first_of("+-");
  if (sign == 0 || sign == std::string_view::npos || sign + 1 == text.size()) return std::nullopt;
  const std::string id_text(text.substr(0, sign)), bias_text(text.substr(sign + 1));
  if (id_text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  if (bias_text.find_first_of("+-") != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long id = std::strtoll(id_text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || id > std::numeric_limits<int32_t>::max()) return std::nullopt;
  const float magnitude = std::strtof(bias_text.c_str(), &end);
  if (errno != 0 || *end != '\0') return std::nullopt;
  const LogitBias bias{static_cast<int32_t>(id), text[sign] == '-' ? -magnitude : magnitude};
  const LogitBias one[] = {bias};
  if (!logit_bias_error(one, std::numeric_limits<int32_t>::max()).empty()) return std::nullopt;
  return bias;
}

}  // namespace lumen::cli
