# FSDP in bf16 and f16 with --clip, gathered per task and per step, against
# plain data parallelism on the loop and every schedule, in-process and
# under mpirun -np 4 where this build has MPI (tests/fsdp_mixed.sh).
add_test(NAME fsdp_mixed COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/fsdp_mixed.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(fsdp_mixed PROPERTIES TIMEOUT 600 RESOURCE_LOCK mpirun)
if(MPMD_MPI_TEST_ENV) # the sanitizer build (CMakeLists.txt)
  set_property(TEST fsdp_mixed PROPERTY ENVIRONMENT ${MPMD_MPI_TEST_ENV})
endif()
