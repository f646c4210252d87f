# What `cmake --install` adds besides the headers, libraries and tool:
#   <libdir>/cmake/mpmd/   mpmdConfig.cmake, its version file and the
#                          exported targets mpmd::mpmd (shared) and
#                          mpmd::mpmd_static, for find_package(mpmd)
#   <libdir>/pkgconfig/mpmd.pc
# Included by the top-level CMakeLists.txt once the targets exist.
include(CMakePackageConfigHelpers)

set(MPMD_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mpmd)
install(EXPORT mpmdTargets NAMESPACE mpmd:: DESTINATION ${MPMD_CMAKE_INSTALL_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/mpmdConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mpmdConfig.cmake
  INSTALL_DESTINATION ${MPMD_CMAKE_INSTALL_DIR})
# 0.x: a minor release may break the API, as the soname says.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mpmdConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mpmdConfig.cmake ${PROJECT_BINARY_DIR}/mpmdConfigVersion.cmake
  DESTINATION ${MPMD_CMAKE_INSTALL_DIR})

# mpmd.pc names the prefix given at install time (cmake --install --prefix P),
# so it is written then: configure-time values now, @MPMD_PC_PREFIX@ kept
# for the install step.
get_filename_component(MPMD_OPENBLAS_DIR ${MPMD_OPENBLAS} DIRECTORY)
# with the MPI runtime, a static link needs MPI's libraries too
set(MPMD_PC_MPI "")
if(MPMD_HAVE_MPI)
  string(JOIN " " MPMD_PC_MPI ${MPI_C_LIBRARIES})
endif()
# with the CUDA backend: the CUDA runtime, cuBLAS (and a run path to them)
# and the C++ runtime its objects need
set(MPMD_PC_CUDA "")
if(MPMD_HAVE_CUDA)
  get_filename_component(_mpmd_cuda_dir ${CUDA_cudart_LIBRARY} DIRECTORY)
  string(JOIN " " MPMD_PC_CUDA ${CUDA_cudart_LIBRARY} ${CUDA_cublas_LIBRARY} -Wl,-rpath,${_mpmd_cuda_dir} -lstdc++)
endif()
set(MPMD_PC_PREFIX "@MPMD_PC_PREFIX@")
configure_file(${CMAKE_CURRENT_LIST_DIR}/mpmd.pc.in ${PROJECT_BINARY_DIR}/mpmd.pc.in @ONLY)
install(CODE "
  set(MPMD_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  string(MD5 _mpmd_pc_tag \"\${MPMD_PC_PREFIX}\")
  set(_mpmd_pc \"${PROJECT_BINARY_DIR}/pkgconfig-\${_mpmd_pc_tag}/mpmd.pc\")
  configure_file(\"${PROJECT_BINARY_DIR}/mpmd.pc.in\" \"\${_mpmd_pc}\" @ONLY)
  file(INSTALL \"\${_mpmd_pc}\" DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig\")
")
