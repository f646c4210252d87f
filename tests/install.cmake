# install_consumer: install this build into a temporary prefix and build a
# small program against the installed copy with find_package(mpmd) and with
# pkg-config, shared and static (tests/install/run.sh says what it checks).
find_program(MPMD_BASH bash REQUIRED)
set(MPMD_INSTALL_TEST_ARGS ${PROJECT_BINARY_DIR} --cmake ${CMAKE_COMMAND} --cc ${CMAKE_C_COMPILER})
if(MPMD_SANITIZE)
  list(APPEND MPMD_INSTALL_TEST_ARGS --sanitize)
endif()
add_test(NAME install_consumer COMMAND ${MPMD_BASH} ${CMAKE_CURRENT_LIST_DIR}/install/run.sh ${MPMD_INSTALL_TEST_ARGS})
set_tests_properties(install_consumer PROPERTIES TIMEOUT 300)
