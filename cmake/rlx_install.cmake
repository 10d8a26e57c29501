include(CMakePackageConfigHelpers)
install(DIRECTORY rlx/ DESTINATION include/rlx FILES_MATCHING PATTERN "*.h")
install(EXPORT rlxTargets NAMESPACE rlx:: DESTINATION lib/cmake/rlx)
configure_package_config_file(cmake/rlxConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/rlxConfig.cmake INSTALL_DESTINATION lib/cmake/rlx)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/rlxConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/rlxConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/rlxConfigVersion.cmake
  DESTINATION lib/cmake/rlx)
