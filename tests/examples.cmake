# The examples run as a user runs them (tests/examples.sh).
add_test(NAME examples COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/examples.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(examples PROPERTIES TIMEOUT 600 RESOURCE_LOCK mpirun)
if(MPMD_MPI_TEST_ENV) # the sanitizer build: its mpirun cases as the MPI tests (CMakeLists.txt)
  set_property(TEST examples PROPERTY ENVIRONMENT ${MPMD_MPI_TEST_ENV})
endif()

# The GPT example on the GPU (make test-gpu): skipped where CUDA cannot run.
if(MPMD_HAVE_CUDA)
  add_test(NAME examples_cuda COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/examples_backend.sh ${PROJECT_BINARY_DIR} cuda)
  set_tests_properties(examples_cuda PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS gpu)
endif()
