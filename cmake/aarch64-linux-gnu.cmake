# Cross build for aarch64 Linux with Debian's cross toolchain (g++-aarch64-linux-gnu) and arm64
# multiarch libraries (scripts/build-arm.sh installs both). Test programs run under
# qemu-user-static; the environment's QEMU_CPU picks the emulated CPU model (qemu's default: max),
# for the test program and for the les processes the tests start.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# arm64 .pc files only: the host's would hand x86-64 libraries to the linker.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
# No -L sysroot: the arm64 multiarch libc (libc6:arm64, pulled in by the libraries above) serves
# the loader; mixing the cross sysroot's ld.so with it hangs at the first thread.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static)
