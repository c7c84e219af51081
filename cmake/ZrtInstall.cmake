# install(): libraries, headers (under include/zrt/<folder>/), the generated build_config.h, and
# an exported CMake package so a user's project does find_package(zrt CONFIG REQUIRED) and links
# zrt::zrt.
include(CMakePackageConfigHelpers)

set(ZRT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/zrt)
set(ZRT_EXPORTED_TARGETS zrt zrt_core zrt_comm zrt_offload zrt_partition zrt_runtime)
foreach(extra zrt_core_cuda zrt_comm_cuda zrt_optim_cuda)
  if(TARGET ${extra})
    list(APPEND ZRT_EXPORTED_TARGETS ${extra})
  endif()
endforeach()

install(TARGETS ${ZRT_EXPORTED_TARGETS} EXPORT zrtTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/zrt)
foreach(dir core comm offload partition runtime)
  install(DIRECTORY ${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/zrt/${dir}
          FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/gen/core/build_config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/zrt/core)
install(EXPORT zrtTargets NAMESPACE zrt:: DESTINATION ${ZRT_INSTALL_CMAKEDIR})

configure_package_config_file(cmake/zrtConfig.cmake.in ${PROJECT_BINARY_DIR}/zrtConfig.cmake
                              INSTALL_DESTINATION ${ZRT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/zrtConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/zrtConfig.cmake ${PROJECT_BINARY_DIR}/zrtConfigVersion.cmake
              cmake/FindLibUring.cmake cmake/FindXxHash.cmake
        DESTINATION ${ZRT_INSTALL_CMAKEDIR})
