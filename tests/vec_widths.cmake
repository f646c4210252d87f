# The CPU kernels' vector widths give the same bits (src/backend/cpu/cpu.h):
# vec_widths runs a training step through them as the library builds them
# (the widest clone this CPU runs), vec_widths_base through the same kernel
# files compiled again with MPMD_NO_VEC_CLONES (the x86-64-v2 baseline; their
# objects stand in for the library's, which is static). Both must print the
# same hash of every result.
set(_vw_kernels ${PROJECT_SOURCE_DIR}/src/backend/cpu/cpu_util.c ${PROJECT_SOURCE_DIR}/src/backend/cpu/elementwise.c
  ${PROJECT_SOURCE_DIR}/src/backend/cpu/nn.c ${PROJECT_SOURCE_DIR}/src/backend/cpu/optim.c)
add_executable(vec_widths vec_widths.c)
target_link_libraries(vec_widths PRIVATE mpmd_testutil mpmd_models)
add_executable(vec_widths_base vec_widths.c ${_vw_kernels})
target_compile_definitions(vec_widths_base PRIVATE MPMD_NO_VEC_CLONES)
target_include_directories(vec_widths_base PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
  ${MPMD_CBLAS_INCLUDE})
target_link_libraries(vec_widths_base PRIVATE mpmd_testutil mpmd_models)
add_test(NAME vec_widths COMMAND sh -c "a=$($<TARGET_FILE:vec_widths>) && b=$($<TARGET_FILE:vec_widths_base>) && \
echo \"widest: $a\" && echo \"baseline: $b\" && [ \"$a\" = \"$b\" ]")
set_tests_properties(vec_widths PROPERTIES TIMEOUT 300)
