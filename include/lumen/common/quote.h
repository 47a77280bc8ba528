#pragma once
// Double-quoted text with C escapes (\" \\ \n \t, \xNN for other control
// bytes), as the AST dump and the program text form print strings.
#include <string>
#include <string_view>

namespace lumen {

std::string quote(std::string_view s);

}  // namespace lumen
