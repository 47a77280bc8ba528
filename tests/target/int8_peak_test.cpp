// The int8 peak probe runs every ISA this CPU has and refuses the others and
// bad arguments. (What it measures is a speed: lumen-bench prints it; no test
// asserts a figure.)
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "lumen/target/int8_peak.h"

namespace lumen {
namespace {

TEST(Int8Peak, RunsEveryIsaThisCpuHasAndRefusesTheOthers) {
  for (Isa isa : kAllIsas) {
    if ((cpu_features() & required_features(isa)) == required_features(isa)) {
      const double gops = measure_int8_peak(isa, 2, 1, 0.5);
      EXPECT_TRUE(std::isfinite(gops) && gops > 0) << to_string(isa) << ": " << gops;
    } else {
      EXPECT_THROW(measure_int8_peak(isa, 1, 1, 0.5), std::invalid_argument) << to_string(isa);
    }
  }
}

TEST(Int8Peak, BadArgumentsThrow) {
  const Isa isa = best_isa(cpu_features());
  EXPECT_THROW(measure_int8_peak(isa, 0), std::invalid_argument);
  EXPECT_THROW(measure_int8_peak(isa, 1, 0), std::invalid_argument);
  EXPECT_THROW(measure_int8_peak(isa, 1, 1, 0.0), std::invalid_argument);
}

}  // namespace
}  // namespace lumen
