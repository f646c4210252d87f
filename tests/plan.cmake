# The cluster planner against published runs (tests/plan_published.sh):
# every row's throughput predicted by `mpmd plan` within 15% of the paper's.
add_test(NAME plan_published COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/plan_published.sh $<TARGET_FILE:mpmd_tool>)
set_tests_properties(plan_published PROPERTIES TIMEOUT 300)
