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

# thread_budget: too few threads allowed is a compile-time error naming the
# option, not an exit from inside OpenMP (tests/thread_budget.sh; skipped
# where it cannot set a process limit).
add_test(NAME thread_budget COMMAND ${MPMD_BASH} ${CMAKE_CURRENT_LIST_DIR}/thread_budget.sh $<TARGET_FILE:gpt>)
set_tests_properties(thread_budget PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
