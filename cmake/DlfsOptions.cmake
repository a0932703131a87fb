# The AUTO / ON / OFF options (DLFS_WITH_FUSE, DLFS_WITH_MPI): normalises
# their values and sets DLFS_WITH_<X>_REQUIRED to REQUIRED when the part was
# asked for explicitly, so that a missing dependency is then an error
# instead of a silently smaller build.
foreach(_dlfs_opt IN ITEMS DLFS_WITH_FUSE DLFS_WITH_MPI)
  set_property(CACHE ${_dlfs_opt} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${_dlfs_opt}}" _dlfs_value)
  if(_dlfs_value STREQUAL "AUTO")
    set(${_dlfs_opt}_REQUIRED "")
  elseif(${_dlfs_opt})
    set(${_dlfs_opt} ON)
    set(${_dlfs_opt}_REQUIRED REQUIRED)
  else()
    set(${_dlfs_opt} OFF)
    set(${_dlfs_opt}_REQUIRED "")
  endif()
endforeach()
