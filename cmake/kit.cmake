# cmake/kit.cmake — the build's third-party libraries from a GPU kit (scripts/gpu-kit) instead of the
# system: -DGR_KIT=DIR. For a machine with a compiler, CMake and Ninja but none of the -dev packages
# (the borrowed GPU machine, docs/verification.md "GPU first contact"). Every library comes from DIR,
# none from the system, so a build that configures in the rehearsal's bare chroot (scripts/gpu-check
# --rehearse) configures there too:
#   CLI11::CLI11, nlohmann_json::nlohmann_json, Catch2::Catch2   header-only, from DIR/include
#   spdlog::spdlog   header-only, fmt as an external header-only library (SPDLOG_FMT_EXTERNAL from
#                    the kit's tweakme.h, FMT_HEADER_ONLY here): nothing to compile or link
#   ZLIB::ZLIB       gr_kit_zlib, a static library compiled here from DIR/zlib's sources
# The find_package() calls of the project stay as they are: cmake/kit/Find<Package>.cmake, first on
# CMAKE_MODULE_PATH, report these targets as found. catch_discover_tests comes from DIR/cmake.
if(NOT EXISTS "${GR_KIT}/MANIFEST" OR NOT EXISTS "${GR_KIT}/versions.cmake")
  message(FATAL_ERROR "GR_KIT=${GR_KIT} is not a GPU kit (no MANIFEST or versions.cmake): make one with scripts/gpu-kit")
endif()
get_filename_component(GR_KIT "${GR_KIT}" ABSOLUTE)
include("${GR_KIT}/versions.cmake")
message(STATUS "GR_KIT: CLI11 ${GR_KIT_CLI11_VERSION}, nlohmann-json ${GR_KIT_nlohmann_json_VERSION}, "
               "Catch2 ${GR_KIT_Catch2_VERSION}, spdlog ${GR_KIT_spdlog_VERSION} + fmt ${GR_KIT_fmt_VERSION} "
               "header-only, zlib ${GR_KIT_ZLIB_VERSION} from source; all from ${GR_KIT}")

set(GR_KIT_INCLUDE "${GR_KIT}/include")
foreach(t CLI11::CLI11 nlohmann_json::nlohmann_json Catch2::Catch2 spdlog::spdlog)
  add_library(${t} INTERFACE IMPORTED GLOBAL)
  # Imported include folders are SYSTEM: project warnings (and -Werror) do not reach them.
  set_target_properties(${t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${GR_KIT_INCLUDE}")
endforeach()
set_target_properties(spdlog::spdlog PROPERTIES INTERFACE_COMPILE_DEFINITIONS "SPDLOG_FMT_EXTERNAL;FMT_HEADER_ONLY")

# zlib: the library's 15 sources, as zlib's own CMakeLists.txt compiles them (unistd.h and stdarg.h
# present, 64-bit file offsets), into a static library; position-independent like Debian's libz.a.
enable_language(C)
set(GR_KIT_ZLIB_SOURCES adler32.c compress.c crc32.c deflate.c gzclose.c gzlib.c gzread.c gzwrite.c infback.c
                        inffast.c inflate.c inftrees.c trees.c uncompr.c zutil.c)
list(TRANSFORM GR_KIT_ZLIB_SOURCES PREPEND "${GR_KIT}/zlib/")
add_library(gr_kit_zlib STATIC ${GR_KIT_ZLIB_SOURCES})
target_include_directories(gr_kit_zlib SYSTEM PUBLIC "${GR_KIT}/zlib")
target_compile_definitions(gr_kit_zlib PRIVATE HAVE_UNISTD_H HAVE_STDARG_H _LARGEFILE64_SOURCE=1)
set_target_properties(gr_kit_zlib PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_options(gr_kit_zlib PRIVATE -w)  # third-party C: its warnings are not ours
add_library(ZLIB::ZLIB ALIAS gr_kit_zlib)

# find_package(X) → cmake/kit/FindX.cmake (found, with the kit's version); include(Catch) → DIR/cmake.
list(PREPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}/kit" "${GR_KIT}/cmake")
