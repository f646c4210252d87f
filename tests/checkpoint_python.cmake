# The sample checkpoint decoded by Python's standard library alone (json,
# struct, hashlib): tests/checkpoint_check.py. Skipped without python3.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME test_checkpoint_python
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_check.py $<TARGET_FILE:test_checkpoint>)
  set_tests_properties(test_checkpoint_python PROPERTIES TIMEOUT 60)
endif()
