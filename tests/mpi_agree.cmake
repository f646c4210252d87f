# The processes of one MPI job built different steps: named before anything
# runs (tests/mpi_agree.sh). Only with the MPI runtime and an mpirun.
find_program(MPMD_MPIRUN NAMES mpirun)
if(MPMD_HAVE_MPI AND MPMD_MPIRUN)
  add_test(NAME mpi_agree COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi_agree.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
  set_tests_properties(mpi_agree PROPERTIES TIMEOUT 300 RESOURCE_LOCK mpirun)
  if(MPMD_MPI_TEST_ENV) # the sanitizer build (CMakeLists.txt)
    set_property(TEST mpi_agree PROPERTY ENVIRONMENT ${MPMD_MPI_TEST_ENV})
  endif()
endif()
