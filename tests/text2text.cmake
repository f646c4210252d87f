# text2text: the README's road from a Hugging Face model to text, on files
# the test writes itself (tests/text2text.sh): llama --init-from a LLaMA
# directory written with numpy, fine-tuned pipelined on a text through a
# tokenizer.json (bit for bit the loop's), saved, then text generated from a
# text prompt, --eos by a token's text.
add_test(NAME text2text COMMAND ${MPMD_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/text2text.sh $<TARGET_FILE:llama>
  $<TARGET_FILE:tokenizer_tool> ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(text2text PROPERTIES TIMEOUT 600)
