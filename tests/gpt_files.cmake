# gpt_files: the gpt program on the files it reads besides text
# (tests/gpt_files.sh): GPT-2 weights in Hugging Face's layout (--init-from)
# and llm.c token files (--tokens), written by the gpt_files tool
# (tests/gpt_files_main.c), good and broken.
add_executable(gpt_files gpt_files_main.c)
target_link_libraries(gpt_files PRIVATE mpmd_testutil)
target_compile_options(gpt_files PRIVATE ${MPMD_WARNINGS})
add_test(NAME gpt_files
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/gpt_files.sh $<TARGET_FILE:gpt> $<TARGET_FILE:gpt_files> ${PROJECT_SOURCE_DIR})
set_tests_properties(gpt_files PROPERTIES TIMEOUT 300 RESOURCE_LOCK mpirun)
if(MPMD_MPI_TEST_ENV) # the sanitizer build: its mpirun case as the MPI tests (CMakeLists.txt)
  set_property(TEST gpt_files PROPERTY ENVIRONMENT ${MPMD_MPI_TEST_ENV})
endif()
