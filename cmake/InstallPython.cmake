# Run by `cmake --install` (and cpack) from the install(CODE) in
# DlfsPackaging.cmake: installs the Python package dlfs (the pure-Python
# files and the extension module) where this prefix's python3 finds it.
# In: DLFS_PY_MODULE (the built extension), DLFS_PY_SOURCES (python/dlfs),
# DLFS_PY_DIR (relative install dir, or empty), DLFS_PY_VERSION ("3.11"),
# DLFS_PY_SITE (dist-packages on Debian, else site-packages), DLFS_STRIP.
if(NOT DLFS_PY_DIR)
  if(CMAKE_INSTALL_PREFIX MATCHES "(^|/)usr/?$")
    # Debian's python3 packages under /usr: shared by every 3.x.
    set(DLFS_PY_DIR lib/python3/dist-packages)
  else()
    set(DLFS_PY_DIR lib/python${DLFS_PY_VERSION}/${DLFS_PY_SITE})
  endif()
endif()
set(_dlfs_py_dest "${CMAKE_INSTALL_PREFIX}/${DLFS_PY_DIR}/dlfs")
file(INSTALL DESTINATION "${_dlfs_py_dest}" TYPE MODULE FILES "${DLFS_PY_MODULE}")
if(CMAKE_INSTALL_DO_STRIP AND DLFS_STRIP)
  get_filename_component(_dlfs_py_name "${DLFS_PY_MODULE}" NAME)
  execute_process(COMMAND "${DLFS_STRIP}" --strip-unneeded "$ENV{DESTDIR}${_dlfs_py_dest}/${_dlfs_py_name}")
endif()
file(INSTALL DESTINATION "${_dlfs_py_dest}" TYPE DIRECTORY FILES "${DLFS_PY_SOURCES}/"
     FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
