# Project-wide target conventions: warnings are errors on project code, no -ffast-math anywhere.

function(dflash_project_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
endfunction()

# RapidCheck reads RC_PARAMS; CI runs a fixed, bounded number of cases from a fixed seed unless
# the caller's environment already sets RC_PARAMS (properties/main.cpp applies the default).
set(DFLASH_RC_PARAMS "max_success=25 seed=20261129" CACHE STRING
    "RapidCheck parameters used when RC_PARAMS is not set in the environment")

# A GoogleTest executable registered with CTest. Tests that GTEST_SKIP (no GPU, say) are reported
# by CTest as skipped, never as passed.
function(dflash_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  dflash_project_target(${name})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  set_tests_properties(${name} PROPERTIES
    LABELS "${ARG_LABELS}"
    TIMEOUT ${ARG_TIMEOUT}
    SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()

# A RapidCheck + GoogleTest property binary (RC_GTEST_PROP), labelled `properties`.
function(dflash_add_property_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  dflash_add_test(${name} SOURCES ${ARG_SOURCES} LIBS ${ARG_LIBS} dflash_property_main rapidcheck
                  LABELS properties ${ARG_LABELS} TIMEOUT ${ARG_TIMEOUT})
endfunction()

# Adds every subfolder of the current source dir that has a CMakeLists.txt (tests/, properties/
# and bench/ mirror the source tree: each part brings its own folder).
function(dflash_add_part_subdirectories)
  file(GLOB children LIST_DIRECTORIES true RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT children)
  foreach(child IN LISTS children)
    if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${child} AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${child}/CMakeLists.txt)
      add_subdirectory(${child})
    endif()
  endforeach()
endfunction()
