# Saving and resuming a checkpoint under mpirun (tests/checkpoint_mpi.sh),
# when the library has the MPI runtime and mpirun exists.
find_program(MPMD_MPIRUN NAMES mpirun)
if(MPMD_HAVE_MPI AND MPMD_MPIRUN)
  add_test(NAME test_checkpoint_mpi
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_mpi.sh $<TARGET_FILE:test_checkpoint> ${PROJECT_SOURCE_DIR})
  set_tests_properties(test_checkpoint_mpi PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 RESOURCE_LOCK mpirun)
  if(MPMD_MPI_TEST_ENV) # the sanitizer build (CMakeLists.txt)
    set_property(TEST test_checkpoint_mpi PROPERTY ENVIRONMENT ${MPMD_MPI_TEST_ENV})
  endif()
endif()
