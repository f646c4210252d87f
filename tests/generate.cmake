# generate: greedy generation of the gpt and llama programs is the model's
# own argmax on every layout (tests/generate.sh), checked by generate_check
# (tests/generate_check.c) against the forward pass without a cache.
add_executable(generate_check generate_check.c)
target_link_libraries(generate_check PRIVATE mpmd mpmd_models)
target_compile_options(generate_check PRIVATE ${MPMD_WARNINGS})
add_test(NAME generate
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/generate.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} $<TARGET_FILE:generate_check>)
set_tests_properties(generate PROPERTIES TIMEOUT 600 RESOURCE_LOCK mpirun)
if(MPMD_MPI_TEST_ENV) # the sanitizer build: its mpirun cases as the MPI tests (CMakeLists.txt)
  set_property(TEST generate PROPERTY ENVIRONMENT ${MPMD_MPI_TEST_ENV})
endif()
