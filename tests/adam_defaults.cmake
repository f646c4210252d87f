# gpt --beta2 0.999 trains as the library's default AdamW (tests/adam_defaults.c).
add_executable(adam_defaults adam_defaults.c)
target_link_libraries(adam_defaults PRIVATE mpmd_testutil mpmd_models)
target_compile_options(adam_defaults PRIVATE ${MPMD_WARNINGS})
add_test(NAME adam_defaults COMMAND adam_defaults $<TARGET_FILE:gpt>)
