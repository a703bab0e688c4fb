# Cross-compiling gradrun for 64-bit ARM (aarch64) with Debian's cross toolchain
# (g++-aarch64-linux-gnu) and the arm64 -dev packages of Debian's multiarch (zlib1g-dev:arm64,
# libspdlog-dev:arm64, libfmt-dev:arm64; header-only CLI11 and nlohmann-json are shared).
# Used by scripts/cross-check arm64; the binaries run under qemu-user (qemu-aarch64).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: arm64 libraries live in /usr/lib/aarch64-linux-gnu, their CMake packages under it.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# GCC notes a C++17 ABI change of pair-passing on aarch64 (GCC 10.1); nothing here crosses that ABI.
set(CMAKE_CXX_FLAGS_INIT "-Wno-psabi")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
