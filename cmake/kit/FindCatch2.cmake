# With -DGR_KIT (cmake/kit.cmake): Catch2 is the GPU kit's, never the system's.
include(${CMAKE_CURRENT_LIST_DIR}/kit_find.cmake)
