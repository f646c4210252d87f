# README's first example is mpmd.h's, and it builds and trains (tests/readme_example.sh).
# It compiles a plain program against the library: not in a sanitizer build,
# whose library needs the sanitizers' runtime linked in.
if(NOT MPMD_SANITIZE)
  add_test(NAME readme_example COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/readme_example.sh ${PROJECT_BINARY_DIR}
    ${PROJECT_SOURCE_DIR} ${CMAKE_C_COMPILER})
endif()
