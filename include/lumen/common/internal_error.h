// Internal errors: a broken invariant inside Lumen, never the user's fault.
//
// User mistakes (a bad .dsl, a malformed GGUF, a bad flag, a model.so that
// does not match) are diagnostics or the stage's own error type and exit 1.
// A state that earlier stages guarantee and that is nevertheless violated is
// a bug in Lumen: it throws InternalError, whose message starts with
// "internal error: " and names the source line, and every tool exits with
// kInternalErrorExit for it.
#pragma once

#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace lumen {

struct InternalError : std::logic_error {
  // what() is "internal error: <message> (<file>:<line>)"; `file` and `line`
  // are the caller's __FILE__ and __LINE__ (LUMEN_ASSERT and
  // LUMEN_INTERNAL_ERROR pass them). std::source_location would do this
  // without a macro, but clang 14 (the fuzz build) cannot compile it.
  InternalError(std::string_view message, const char* file, int line);
};

// Exit status of a tool stopped by an InternalError (EX_SOFTWARE in sysexits.h).
inline constexpr int kInternalErrorExit = 70;

// Throws InternalError; call it through LUMEN_INTERNAL_ERROR, which names the line.
[[noreturn]] void internal_error(std::string_view message, const char* file, int line);

// Every tool's main runs its work through this: the body's return value is
// the exit status; an InternalError escaping it prints "<tool>: internal
// error: ..." and gives kInternalErrorExit, any other std::exception prints
// "<tool>: error: ..." and gives 1 (a user error). stdout is flushed first,
// so the message follows any output.
int run_tool(std::string_view tool, const std::function<int()>& body, std::FILE* err = stderr);

}  // namespace lumen

// Checks an invariant; `message` (anything convertible to std::string_view)
// is built only when the check fails.
#define LUMEN_ASSERT(cond, message)                                    \
  do {                                                                 \
    if (!(cond)) ::lumen::internal_error(message, __FILE__, __LINE__); \
  } while (false)

// Reports a broken invariant unconditionally (a state that cannot happen).
#define LUMEN_INTERNAL_ERROR(message) ::lumen::internal_error(message, __FILE__, __LINE__)
