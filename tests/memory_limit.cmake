# Runs under an address-space limit end, never hang (tests/memory_limit.sh).
# Not in the sanitizer build: AddressSanitizer reserves terabytes of
# address space, which no such limit leaves.
if(NOT MPMD_SANITIZE)
  add_test(NAME memory_limit COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/memory_limit.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(memory_limit PROPERTIES TIMEOUT 900)
endif()
