// The internal-error channel: LUMEN_ASSERT throws InternalError with the
// "internal error:" prefix and the source line, and run_tool maps it to its
// own exit status, apart from user errors (exit 1).
#include <gtest/gtest.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "lumen/common/internal_error.h"

namespace lumen {
namespace {

std::string message_of(void (*f)()) {
  try {
    f();
  } catch (const InternalError& e) {
    return e.what();
  }
  return "";
}

// Runs `body` through run_tool; returns the exit status, *printed gets stderr's text.
int run_capturing(const std::function<int()>& body, std::string* printed) {
  std::FILE* err = std::tmpfile();
  const int status = run_tool("lumen-test", body, err);
  std::rewind(err);
  printed->clear();
  char buf[512];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, err)) > 0) printed->append(buf, got);
  std::fclose(err);
  return status;
}

TEST(InternalError, AssertThrowsWithPrefixAndSourceLine) {
  const std::string what = message_of([] {
    const int groups = 0;
    LUMEN_ASSERT(groups > 0, "groups must be positive, got " + std::to_string(groups));
  });
  EXPECT_EQ(what.rfind("internal error: groups must be positive, got 0 (internal_error_test.cpp:", 0), 0u) << what;
  EXPECT_EQ(what.back(), ')');
}

TEST(InternalError, AssertThatHoldsDoesNothing) {
  EXPECT_NO_THROW(LUMEN_ASSERT(1 + 1 == 2, "arithmetic"));
}

TEST(InternalError, IsNotAUserError) {
  // User errors are std::runtime_error kinds; an internal error must not be caught as one.
  EXPECT_THROW(LUMEN_INTERNAL_ERROR("x"), std::logic_error);
  bool caught_as_runtime_error = false;
  try {
    LUMEN_INTERNAL_ERROR("x");
  } catch (const std::runtime_error&) {
    caught_as_runtime_error = true;
  } catch (const InternalError&) {
  }
  EXPECT_FALSE(caught_as_runtime_error);
}

TEST(RunTool, MapsEachChannelToItsExitStatus) {
  std::string printed;
  EXPECT_EQ(run_capturing([] { return 0; }, &printed), 0);
  EXPECT_EQ(printed, "");
  EXPECT_EQ(run_capturing([] { return 2; }, &printed), 2);
  EXPECT_EQ(run_capturing([]() -> int { throw std::runtime_error("cannot read 'x.gguf'"); }, &printed), 1);
  EXPECT_EQ(printed, "lumen-test: error: cannot read 'x.gguf'\n");
  EXPECT_EQ(run_capturing([]() -> int { LUMEN_INTERNAL_ERROR("a pass broke the IR"); }, &printed), kInternalErrorExit);
  EXPECT_EQ(printed.rfind("lumen-test: internal error: a pass broke the IR (internal_error_test.cpp:", 0), 0u)
      << printed;
  EXPECT_EQ(kInternalErrorExit, 70);
}

}  // namespace
}  // namespace lumen
