# Writes the CTest file of one GoogleTest binary: its tests in groups, one CTest test per group.
#
# Why groups and not one process per test: a test binary that links LibTorch spends most of a
# second starting (loading the library and registering its operators) before its first test
# runs, which over the suite's ~700 such tests was about a quarter of the whole run on two
# cores. A group runs up to GROUP consecutive tests of one GoogleTest suite in one process
# (--gtest_filter), so a failure still names its suite and the output names the test.
#
# Run as a script after the binary is linked:
#   cmake -D BIN=<binary> -D OUT=<ctest file> -D GROUP=<tests per group> -D TIMEOUT=<seconds>
#         -D WORKDIR=<directory> -P gtest_groups.cmake
foreach(var BIN OUT GROUP TIMEOUT WORKDIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "gtest_groups.cmake: -D ${var}=... is required")
  endif()
endforeach()

execute_process(COMMAND "${BIN}" --gtest_list_tests
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gtest_groups.cmake: '${BIN} --gtest_list_tests' failed (${rc})")
endif()

# --gtest_list_tests prints each suite as "Suite." (a parameterised one as "Prefix/Suite."),
# then its tests indented by two spaces; either may end with a "  # ..." comment.
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
get_filename_component(bin_name "${BIN}" NAME)
set(suite "")
set(content "")
set(group "")
set(in_group 0)
set(index 0)

macro(flush_group)
  if(in_group GREATER 0)
    math(EXPR index "${index} + 1")
    set(name "${bin_name}:${suite}${index}")
    string(APPEND content
           "add_test([=[${name}]=] [==[${BIN}]==] [==[--gtest_filter=${group}]==])\n"
           "set_tests_properties([=[${name}]=] PROPERTIES TIMEOUT ${TIMEOUT} "
           "WORKING_DIRECTORY [==[${WORKDIR}]==])\n")
    set(group "")
    set(in_group 0)
  endif()
endmacro()

foreach(line IN LISTS lines)
  if(line MATCHES "^([A-Za-z0-9_/]+)\\.( +#.*)?$")
    flush_group()
    set(suite "${CMAKE_MATCH_1}.")
    set(index 0)
  elseif(line MATCHES "^  ([A-Za-z0-9_/]+)( +#.*)?$" AND NOT suite STREQUAL "")
    if(in_group GREATER 0)
      string(APPEND group ":")
    endif()
    string(APPEND group "${suite}${CMAKE_MATCH_1}")
    math(EXPR in_group "${in_group} + 1")
    if(in_group GREATER_EQUAL GROUP)
      flush_group()
    endif()
  endif()
endforeach()
flush_group()

if(content STREQUAL "")
  message(FATAL_ERROR "gtest_groups.cmake: '${BIN} --gtest_list_tests' listed no test")
endif()
file(WRITE "${OUT}" "${content}")
