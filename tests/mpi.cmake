# The MPI runtime's tests (only when the library was built with MPI and
# mpirun exists): every case of the equivalence list under mpirun, over
# shared memory and over TCP only; data parallelism; a failing rank and a
# killed rank ending the whole job with a message.
find_program(MPMD_MPIRUN NAMES mpirun)
if(MPMD_HAVE_MPI AND MPMD_MPIRUN)
  add_executable(mpi_check mpi_check.c)
  target_link_libraries(mpi_check PRIVATE mpmd_testutil mpmd_models)
  target_compile_options(mpi_check PRIVATE ${MPMD_WARNINGS})
  set(run ${CMAKE_CURRENT_SOURCE_DIR}/mpirun.sh)
  foreach(t shm tcp)
    foreach(np 1 2 3 4)
      add_test(NAME mpi_equivalence_${t}_${np} COMMAND ${run} ${t} ${np} $<TARGET_FILE:mpi_check>)
    endforeach()
    add_test(NAME mpi_data_parallel_${t} COMMAND ${run} ${t} 4 $<TARGET_FILE:mpi_check> --data 2)
  endforeach()
  add_test(NAME mpi_failures COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi_failures.sh $<TARGET_FILE:mpi_check>)
  add_test(NAME mpi_failed_step COMMAND ${run} shm 2 $<TARGET_FILE:mpi_check> --fail-both)
  add_test(NAME mpi_partial_load COMMAND ${run} shm 4 $<TARGET_FILE:mpi_check> --partial-load)
  set_tests_properties(mpi_failed_step PROPERTIES TIMEOUT 60)
  if(MPMD_MPI_TEST_ENV) # the sanitizer build (CMakeLists.txt)
    foreach(t shm tcp)
      set_property(TEST mpi_data_parallel_${t} PROPERTY ENVIRONMENT ${MPMD_MPI_TEST_ENV})
      foreach(np 1 2 3 4)
        set_property(TEST mpi_equivalence_${t}_${np} PROPERTY ENVIRONMENT ${MPMD_MPI_TEST_ENV})
      endforeach()
    endforeach()
    set_property(TEST mpi_failures mpi_failed_step mpi_partial_load PROPERTY ENVIRONMENT ${MPMD_MPI_TEST_ENV})
  endif()
  set_tests_properties(mpi_failures PROPERTIES TIMEOUT 180)
  # mpirun jobs share the two cores: run them one at a time
  set_property(TEST mpi_failures mpi_failed_step mpi_partial_load mpi_data_parallel_shm mpi_data_parallel_tcp
    mpi_equivalence_shm_1 mpi_equivalence_shm_2 mpi_equivalence_shm_3 mpi_equivalence_shm_4
    mpi_equivalence_tcp_1 mpi_equivalence_tcp_2 mpi_equivalence_tcp_3 mpi_equivalence_tcp_4
    PROPERTY RESOURCE_LOCK mpirun)
endif()
