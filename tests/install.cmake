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

# docs_reference: docs/reference.md restates every declaration of
# include/*.h, and the docs name only functions and types that exist.
# docs_examples: the C blocks of docs/guide.md and of
# docs/porting-from-jaxpp.md are each one program; both build and run.
add_test(NAME docs_reference
  COMMAND ${MPMD_BASH} ${CMAKE_CURRENT_LIST_DIR}/check_reference.sh ${PROJECT_SOURCE_DIR} --cc ${CMAKE_C_COMPILER})
set(MPMD_DOCS_EXAMPLES_ARGS ${PROJECT_SOURCE_DIR} --cc ${CMAKE_C_COMPILER} --examples $<TARGET_FILE:mpmd_shared>)
if(MPMD_SANITIZE)
  list(APPEND MPMD_DOCS_EXAMPLES_ARGS --sanitize)
endif()
add_test(NAME docs_examples COMMAND ${MPMD_BASH} ${CMAKE_CURRENT_LIST_DIR}/check_reference.sh ${MPMD_DOCS_EXAMPLES_ARGS})
set_tests_properties(docs_reference docs_examples PROPERTIES TIMEOUT 120)
