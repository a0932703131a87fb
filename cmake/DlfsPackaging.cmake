# Installing dlfs: `cmake --install`, find_package(dlfs), pkg-config and the
# .deb (`cpack -G DEB`). Included at the end of the top-level CMakeLists.txt.
#
# What is installed:
#   lib/libdlfs.a, lib/libdlfs_mpi.a (with MPI), lib/libdlfs_report.a (with
#   the CLI), include/dlfs/*.h (the users' API), include/dlfs_tools/*.h (the
#   tools': measuring runs and reports)
#   lib/cmake/dlfs/   dlfsConfig.cmake: imported targets dlfs::dlfs, dlfs::mpi,
#                     dlfs::report
#   lib/pkgconfig/dlfs.pc
#   bin/dlfs          the CLI (DLFS_BUILD_CLI)
#   the Python package dlfs (DLFS_BUILD_PYTHON), where python3 looks for it
#
# The libraries are static, so their private dependencies (libisal,
# libarchive, liburing, zlib, libfuse3, ...) must be linked by every
# consumer: dlfsConfig.cmake finds them again and the imported targets carry
# them, dlfs.pc lists them in Requires. Both lists are derived from the
# targets' LINK_LIBRARIES below, so a dependency added to the library is
# exported without further edits (and an unknown kind stops the configure).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DLFS_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/dlfs")
set(DLFS_SUMMARY
  "packed sample volumes and a fast shuffled batch loader for deep-learning training")

# ---- Dependencies of the exported libraries ---------------------------------

# The Debian package that owns `file` (e.g. libisal-dev for libisal.pc), or
# "" when dpkg does not know it.
function(dlfs_debian_package_of file out)
  set(pkg "")
  find_program(DLFS_DPKG_QUERY dpkg-query)
  if(DLFS_DPKG_QUERY AND EXISTS "${file}")
    file(REAL_PATH "${file}" real)
    foreach(candidate IN ITEMS "${file}" "${real}")
      execute_process(COMMAND ${DLFS_DPKG_QUERY} -S "${candidate}" OUTPUT_VARIABLE owner
                      ERROR_QUIET RESULT_VARIABLE rc)
      if(rc EQUAL 0 AND owner MATCHES "^([^:, ]+)")
        set(pkg "${CMAKE_MATCH_1}")
        break()
      endif()
    endforeach()
  endif()
  set(${out} "${pkg}" PARENT_SCOPE)
endfunction()

# Describes what a consumer of `target` must find again:
#   <out>_CODE  CMake code for dlfsConfig.cmake that looks each dependency up
#               and appends what it cannot find to _dlfs_missing
#   <out>_PC    pkg-config modules (for Requires)
#   <out>_LIBS  extra linker flags (for Libs)
#   <out>_DEB   Debian packages providing them (for the .deb's Depends)
function(dlfs_describe_dependencies target out)
  get_target_property(libs ${target} LINK_LIBRARIES)
  set(code "")
  set(pc "")
  set(flags "")
  set(debs "")
  foreach(lib IN LISTS libs)
    if(lib MATCHES "^\\$<BUILD_INTERFACE:")
      # Used while building only (nlohmann_json in dlfs_report): not exported.
      continue()
    elseif(lib MATCHES "^PkgConfig::(.+)$")
      set(prefix "${CMAKE_MATCH_1}")
      set(module "${${prefix}_MODULE_NAME}")
      if(NOT module)
        message(FATAL_ERROR "dlfs packaging: no pkg-config module name for ${lib}")
      endif()
      execute_process(COMMAND ${PKG_CONFIG_EXECUTABLE} --variable=pcfiledir ${module}
                      OUTPUT_VARIABLE pcdir OUTPUT_STRIP_TRAILING_WHITESPACE)
      dlfs_debian_package_of("${pcdir}/${module}.pc" deb)
      string(APPEND code
        "if(NOT TARGET PkgConfig::${prefix} AND PKG_CONFIG_FOUND)\n"
        "  pkg_check_modules(${prefix} QUIET IMPORTED_TARGET ${module})\n"
        "endif()\n"
        "if(NOT TARGET PkgConfig::${prefix})\n"
        "  list(APPEND _dlfs_missing \"${module} (pkg-config; Debian: ${deb})\")\n"
        "endif()\n")
      list(APPEND pc ${module})
    elseif(lib STREQUAL "ZLIB::ZLIB")
      dlfs_debian_package_of("${ZLIB_INCLUDE_DIR}/zlib.h" deb)
      string(APPEND code
        "if(NOT TARGET ZLIB::ZLIB)\n"
        "  find_package(ZLIB QUIET)\n"
        "endif()\n"
        "if(NOT TARGET ZLIB::ZLIB)\n"
        "  list(APPEND _dlfs_missing \"zlib (Debian: ${deb})\")\n"
        "endif()\n")
      list(APPEND pc zlib)
    elseif(lib STREQUAL "Threads::Threads")
      string(APPEND code
        "if(NOT TARGET Threads::Threads)\n"
        "  set(THREADS_PREFER_PTHREAD_FLAG ON)\n"
        "  find_package(Threads QUIET)\n"
        "endif()\n"
        "if(NOT TARGET Threads::Threads)\n"
        "  list(APPEND _dlfs_missing \"threads\")\n"
        "endif()\n")
      list(APPEND flags -pthread)
    elseif(lib STREQUAL "MPI::MPI_C")
      list(GET MPI_C_HEADER_DIR 0 mpi_dir)
      dlfs_debian_package_of("${mpi_dir}/mpi.h" deb)
      string(APPEND code
        "if(NOT TARGET MPI::MPI_C)\n"
        "  find_package(MPI QUIET COMPONENTS C)\n"
        "endif()\n"
        "if(NOT TARGET MPI::MPI_C)\n"
        "  list(APPEND _dlfs_missing \"MPI for C (Debian: ${deb})\")\n"
        "endif()\n")
    elseif(lib MATCHES "^dlfs(_mpi|_report)?$")
      # One of ours: exported by name.
    else()
      message(FATAL_ERROR
        "dlfs packaging: ${target} links '${lib}', which cmake/DlfsPackaging.cmake does not "
        "know how to pass on to consumers; link a PkgConfig:: target or teach "
        "dlfs_describe_dependencies")
    endif()
    if(deb)
      list(APPEND debs ${deb})
    endif()
    set(deb "")
  endforeach()
  list(REMOVE_DUPLICATES debs)
  set(${out}_CODE "${code}" PARENT_SCOPE)
  set(${out}_PC "${pc}" PARENT_SCOPE)
  set(${out}_LIBS "${flags}" PARENT_SCOPE)
  set(${out}_DEB "${debs}" PARENT_SCOPE)
endfunction()

# ---- Libraries, headers, CMake package ----------------------------------------

install(TARGETS dlfs EXPORT dlfsTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# `cmake --install --strip` (and cpack) strips the CLI and the Python module;
# the static libraries lose their debug sections only.
function(dlfs_strip_static_on_install target)
  install(CODE "if(CMAKE_INSTALL_DO_STRIP)
    execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug
      \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:${target}>\")
  endif()")
endfunction()
dlfs_strip_static_on_install(dlfs)
# dlfs_report (dlfs_tools/report.h: the text and JSON documents `dlfs info`,
# `verify`, `ls`, ... print), built with the CLI, is installed with dlfs, so
# find_package(dlfs) gives a C++ program dlfs::report; its dependencies are
# dlfs's. Its headers, and the measuring runs they report on (RunEpochs,
# BenchVolumes), are the tools' interface (tools/include/dlfs_tools), beside
# the users' (include/dlfs). The MPI runs' reports (dlfs_mpi_report,
# dlfs_tools/mpi_report.h) are not installed, nor is report.h without its
# library: headers with nothing to link.
set(_dlfs_tools_not_installed PATTERN "mpi_report.h" EXCLUDE)
if(TARGET dlfs_report)
  install(TARGETS dlfs_report EXPORT dlfsTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  dlfs_strip_static_on_install(dlfs_report)
else()
  list(APPEND _dlfs_tools_not_installed PATTERN "report.h" EXCLUDE)
endif()
install(DIRECTORY include/dlfs DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(DIRECTORY tools/include/dlfs_tools DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h" ${_dlfs_tools_not_installed})
install(FILES ${PROJECT_BINARY_DIR}/include/dlfs/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dlfs)
install(EXPORT dlfsTargets NAMESPACE dlfs:: DESTINATION ${DLFS_INSTALL_CMAKEDIR})
dlfs_describe_dependencies(dlfs DLFS_CORE_DEPS)
if(TARGET dlfs_report)
  # In dlfsTargets too: what it links must be found before that is included.
  dlfs_describe_dependencies(dlfs_report DLFS_REPORT_DEPS)
  string(APPEND DLFS_CORE_DEPS_CODE "${DLFS_REPORT_DEPS_CODE}")
  list(APPEND DLFS_CORE_DEPS_DEB ${DLFS_REPORT_DEPS_DEB})
  list(REMOVE_DUPLICATES DLFS_CORE_DEPS_DEB)
endif()

set(DLFS_MPI_DEPS_CODE "")
set(DLFS_MPI_DEPS_DEB "")
if(DLFS_HAVE_MPI)
  install(TARGETS dlfs_mpi EXPORT dlfsMpiTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT dlfsMpiTargets NAMESPACE dlfs:: DESTINATION ${DLFS_INSTALL_CMAKEDIR})
  dlfs_strip_static_on_install(dlfs_mpi)
  dlfs_describe_dependencies(dlfs_mpi DLFS_MPI_DEPS)
endif()

configure_package_config_file(cmake/dlfsConfig.cmake.in
  ${PROJECT_BINARY_DIR}/dlfsConfig.cmake
  INSTALL_DESTINATION ${DLFS_INSTALL_CMAKEDIR})
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dlfsConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dlfsConfig.cmake ${PROJECT_BINARY_DIR}/dlfsConfigVersion.cmake
  DESTINATION ${DLFS_INSTALL_CMAKEDIR})

# ---- pkg-config -----------------------------------------------------------------
# Relocatable: paths are relative to where dlfs.pc is installed, so the same
# file serves `cmake --install --prefix ANY` and the .deb (prefix /usr).
file(RELATIVE_PATH DLFS_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" DLFS_PC_TO_PREFIX "${DLFS_PC_TO_PREFIX}")
# A static library's dependencies go in Requires (not Requires.private), so a
# plain `pkg-config --libs dlfs` links.
list(JOIN DLFS_CORE_DEPS_PC " " DLFS_PC_REQUIRES)
list(JOIN DLFS_CORE_DEPS_LIBS " " DLFS_PC_LIBS)
configure_file(cmake/dlfs.pc.in ${PROJECT_BINARY_DIR}/dlfs.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dlfs.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- The CLI and the Python package -------------------------------------------

if(TARGET dlfs_cli)
  install(TARGETS dlfs_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

if(TARGET _dlfs)
  # Empty: lib/python3/dist-packages under the prefix /usr (Debian's layout),
  # else lib/python3.X/dist-packages on Debian (read from /usr/local) or
  # lib/python3.X/site-packages elsewhere.
  set(DLFS_INSTALL_PYTHONDIR "" CACHE STRING
    "Where cmake --install puts the Python package dlfs, relative to the prefix (empty: automatic)")
  if(EXISTS /etc/debian_version)
    set(_dlfs_site dist-packages)
  else()
    set(_dlfs_site site-packages)
  endif()
  # Decided at install time: cpack installs with the prefix /usr whatever
  # CMAKE_INSTALL_PREFIX was at configure time.
  install(CODE "
    set(DLFS_PY_MODULE \"$<TARGET_FILE:_dlfs>\")
    set(DLFS_PY_SOURCES \"${PROJECT_SOURCE_DIR}/python/dlfs\")
    set(DLFS_PY_DIR \"${DLFS_INSTALL_PYTHONDIR}\")
    set(DLFS_PY_VERSION \"${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}\")
    set(DLFS_PY_SITE \"${_dlfs_site}\")
    set(DLFS_STRIP \"${CMAKE_STRIP}\")
    include(\"${PROJECT_SOURCE_DIR}/cmake/InstallPython.cmake\")")
endif()

# ---- The Debian package: cpack -G DEB -------------------------------------------
# One package, dlfs_<version>_<arch>.deb, installing under /usr: the CLI and
# the Python module (their shared-library dependencies computed by
# dpkg-shlibdeps), and the static libraries with headers, CMake package and
# dlfs.pc (Depends on the -dev packages a consumer links against; the MPI
# ones are Recommends, as dlfs::mpi is optional in dlfsConfig.cmake).
set(CPACK_PACKAGE_NAME dlfs)
set(CPACK_PACKAGE_VENDOR "dlfs")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${DLFS_SUMMARY}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "dlfs maintainers <dlfs@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_STRIP_FILES TRUE)
set(_dlfs_depends ${DLFS_CORE_DEPS_DEB} pkg-config)
if(TARGET _dlfs)
  # The module is built for one Python minor version (its ABI).
  math(EXPR _dlfs_next_minor "${Python_VERSION_MINOR} + 1")
  list(APPEND _dlfs_depends
    "python3 (>= ${Python_VERSION_MAJOR}.${Python_VERSION_MINOR})"
    "python3 (<< ${Python_VERSION_MAJOR}.${_dlfs_next_minor})" python3-numpy)
endif()
list(JOIN _dlfs_depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
set(_dlfs_suggests python3-torch python3-tqdm)
list(JOIN _dlfs_suggests ", " CPACK_DEBIAN_PACKAGE_SUGGESTS)
if(DLFS_MPI_DEPS_DEB)
  list(JOIN DLFS_MPI_DEPS_DEB ", " CPACK_DEBIAN_PACKAGE_RECOMMENDS)
endif()
include(CPack)
