# Included by cmake/kit/Find<Package>.cmake when the build uses a GPU kit (cmake/kit.cmake): the
# package is the kit's target, made there; this only reports it found, with the kit's version, so the
# project's find_package(<Package> [version] REQUIRED) calls stay as they are.
include(FindPackageHandleStandardArgs)
set(_gr_pkg ${CMAKE_FIND_PACKAGE_NAME})
set(${_gr_pkg}_VERSION "${GR_KIT_${_gr_pkg}_VERSION}")
set(_gr_kit_dir "${GR_KIT}")
find_package_handle_standard_args(${_gr_pkg} REQUIRED_VARS _gr_kit_dir VERSION_VAR ${_gr_pkg}_VERSION)
