# The examples run as a user runs them (tests/examples.sh).
add_test(NAME examples COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/examples.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(examples PROPERTIES TIMEOUT 600 RESOURCE_LOCK mpirun)
