# torch_reference: mpmd's GPT, the tutorial's Block and every op family
# against PyTorch in float64 (tests/torch_reference.py reads what
# tests/reference_dump.c writes). Debian's python3-torch installs for
# Debian's own interpreter, so the test calls /usr/bin/python3 by path;
# `make deps` installs python3-torch and python3-numpy.
add_executable(reference_dump reference_dump.c)
target_link_libraries(reference_dump PRIVATE mpmd_testutil mpmd_models)
target_compile_options(reference_dump PRIVATE ${MPMD_WARNINGS})
add_test(NAME torch_reference
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/torch_reference.sh $<TARGET_FILE:reference_dump> ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(torch_reference PROPERTIES TIMEOUT 300)
