# dropped_marker: a stage marker whose result is dropped does not build with
# -Werror, and without it the pipeline's compilation fails with the cause
# (tests/dropped_marker.sh). Against the shared library; not in the
# sanitizer build, whose library needs the sanitizers' runtime.
if(NOT MPMD_SANITIZE)
  add_test(NAME dropped_marker
    COMMAND ${MPMD_BASH} ${CMAKE_CURRENT_LIST_DIR}/dropped_marker.sh ${CMAKE_C_COMPILER} ${PROJECT_SOURCE_DIR}
            $<TARGET_FILE:mpmd_shared>)
  set_tests_properties(dropped_marker PROPERTIES TIMEOUT 60)
endif()
