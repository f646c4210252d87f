# The shared library exports exactly its API (tests/exports.sh).
add_test(NAME exports COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/exports.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(exports PROPERTIES SKIP_RETURN_CODE 77)
