# cli_misuse: gpt, llama and the mpmd tool against a user who gets things
# wrong, or a full disk (tests/cli_misuse.sh).
add_test(NAME cli_misuse COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli_misuse.sh $<TARGET_FILE:gpt> $<TARGET_FILE:llama>
  $<TARGET_FILE:mpmd_tool> $<TARGET_FILE:gpt_files>)
set_tests_properties(cli_misuse PROPERTIES TIMEOUT 300)
