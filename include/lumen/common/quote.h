#pragma once
// How text is quoted in what Lumen prints.
#include <string>
#include <string_view>

namespace lumen {

// Double-quoted text with C escapes (\" \\ \n \t, \xNN for other control
// bytes), as the AST dump and the program text form print strings.
std::string quote(std::string_view s);

// A name or a piece of source between single quotes, as diagnostics cite
// them ('n_embd' is used before its definition); no escaping.
std::string quoted(std::string_view s);

}  // namespace lumen
