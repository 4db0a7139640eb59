# Writes OUT: a C++ function embedded_matrix(name) returning the text of each DIR/<name>.toml. Run at build time by reports/CMakeLists.txt.
file(GLOB FILES ${DIR}/*.toml)
list(SORT FILES)
set(body "")
foreach(f ${FILES})
  get_filename_component(name ${f} NAME_WE)
  file(READ ${f} text)
  string(APPEND body "  if (name == \"${name}\") return R\"parity_toml(${text})parity_toml\";\n")
endforeach()
file(WRITE ${OUT} "// Generated from matrices/*.toml by cmake/embed_matrices.cmake: do not edit.
#include \"reports/matrix.h\"

namespace parity::reports {

std::string embedded_matrix(const std::string& name) {
${body}  return {};
}

}  // namespace parity::reports
")
