# gpt_signals, gpt_checkpoint_model: the gpt program's checkpoints as a run
# on a cluster meets them (tests/gpt_checkpoints.sh): stopped by SIGTERM,
# SIGINT or SIGUSR1, between steps, during a save, twice, under mpirun;
# rotation; --resume latest past damaged files; failed saves; the model a
# checkpoint records, refused when the run's differs.
add_test(NAME gpt_signals COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpt_checkpoints.sh ${PROJECT_BINARY_DIR}
  ${PROJECT_SOURCE_DIR} signals)
add_test(NAME gpt_checkpoint_model COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpt_checkpoints.sh ${PROJECT_BINARY_DIR}
  ${PROJECT_SOURCE_DIR} model)
set_tests_properties(gpt_signals PROPERTIES TIMEOUT 900 RESOURCE_LOCK mpirun)
set_tests_properties(gpt_checkpoint_model PROPERTIES TIMEOUT 300)
if(MPMD_MPI_TEST_ENV) # the sanitizer build: its mpirun cases as the MPI tests (CMakeLists.txt)
  set_property(TEST gpt_signals PROPERTY ENVIRONMENT ${MPMD_MPI_TEST_ENV})
endif()
