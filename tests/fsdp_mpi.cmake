# FSDP under mpirun over 3 replicas with parameter sizes 3 does not divide
# (tests/fsdp_mpi.sh): the loop on 3 processes and a 2-stage pipeline on 6,
# f32 and bf16, the bits of in-process plain data parallelism. Only when the
# library has the MPI runtime and mpirun exists.
find_program(MPMD_MPIRUN NAMES mpirun)
if(MPMD_HAVE_MPI AND MPMD_MPIRUN)
  add_test(NAME fsdp_mpi_uneven_shards COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/fsdp_mpi.sh ${PROJECT_BINARY_DIR}
    ${PROJECT_SOURCE_DIR})
  set_tests_properties(fsdp_mpi_uneven_shards PROPERTIES TIMEOUT 300 RESOURCE_LOCK mpirun)
  if(MPMD_MPI_TEST_ENV) # the sanitizer build (CMakeLists.txt)
    set_property(TEST fsdp_mpi_uneven_shards PROPERTY ENVIRONMENT ${MPMD_MPI_TEST_ENV})
  endif()
endif()
