# Provides xxhash::xxhash from Debian's libxxhash-dev.
find_path(XxHash_INCLUDE_DIR xxhash.h)
find_library(XxHash_LIBRARY xxhash)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(XxHash REQUIRED_VARS XxHash_LIBRARY XxHash_INCLUDE_DIR)
if(XxHash_FOUND AND NOT TARGET xxhash::xxhash)
  add_library(xxhash::xxhash UNKNOWN IMPORTED)
  set_target_properties(xxhash::xxhash PROPERTIES
    IMPORTED_LOCATION ${XxHash_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${XxHash_INCLUDE_DIR})
endif()
