# The mpmd command's tests. test_schedule_cli (registered by the glob in
# tests/CMakeLists.txt) runs the built tool; it gets the tool's path at
# compile time, and the tool is built before it.
if(TARGET test_schedule_cli)
  target_compile_definitions(test_schedule_cli PRIVATE MPMD_TOOL="$<TARGET_FILE:mpmd_tool>")
  add_dependencies(test_schedule_cli mpmd_tool)
endif()
