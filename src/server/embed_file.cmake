# Writes a C++ header holding a file's bytes, so lumen-server serves its chat
# page from the binary: cmake -DINPUT=page.html -DOUTPUT=page.h -DNAME=kPage -P embed_file.cmake
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REPEAT "[0-9a-f]" 64 line)  # 32 bytes a line
string(REGEX REPLACE "(${line})" "\\1\n    " bytes "${hex}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${bytes}")
get_filename_component(source "${INPUT}" NAME)
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${source} by embed_file.cmake; do not edit.\n"
  "#pragma once\n#include <string_view>\n"
  "namespace lumen::server {\n"
  "inline constexpr char ${NAME}_bytes[${size}] = {\n    ${bytes}};\n"
  "inline constexpr std::string_view ${NAME}{${NAME}_bytes, ${size}};\n"
  "}  // namespace lumen::server\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
