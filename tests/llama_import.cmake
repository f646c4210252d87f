# llama_import: llama --init-from reads Hugging Face LLaMA-family model
# directories written by an independent PyTorch LLaMA (tests/llama_import.py):
# loss and greedy generation equal to the reference's on the loop, a pipeline
# and tensor parallelism, and the bad files named.
add_test(NAME llama_import COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/llama_import.sh $<TARGET_FILE:llama>
  ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(llama_import PROPERTIES TIMEOUT 600)
