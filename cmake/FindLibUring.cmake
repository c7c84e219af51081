# Provides liburing::liburing from Debian's liburing-dev.
find_path(LibUring_INCLUDE_DIR liburing.h)
find_library(LibUring_LIBRARY uring)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LibUring REQUIRED_VARS LibUring_LIBRARY LibUring_INCLUDE_DIR)
if(LibUring_FOUND AND NOT TARGET liburing::liburing)
  add_library(liburing::liburing UNKNOWN IMPORTED)
  set_target_properties(liburing::liburing PROPERTIES
    IMPORTED_LOCATION ${LibUring_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${LibUring_INCLUDE_DIR})
endif()
