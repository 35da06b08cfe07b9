# The library's API table and install instructions (README: docs/library.md)
# say what compiles: publish() returns PublishResult (not PublishStatus), the
# page says C++20 is required and how an outside project finds the install.
file(READ "${README}" readme)
get_filename_component(doc "${README}" NAME)
file(READ "${PRODUCER_HPP}" producer)
file(READ "${LIB_CMAKE}" lib_cmake)

string(REGEX MATCH "\n\\| `publish\\(bytes, timeout\\)` \\| [^\n]*" row "${readme}")
if(NOT row)
  message(FATAL_ERROR "${doc}: no API table row for `publish(bytes, timeout)`")
endif()
string(REGEX MATCH "`\\[\\[nodiscard\\]\\] ([A-Za-z_:]+)`" _ "${row}")
set(documented "${CMAKE_MATCH_1}")
string(FIND "${producer}" "[[nodiscard]] ${documented} publish(" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${doc} says publish() returns '${documented}'; producer.hpp declares otherwise")
endif()
foreach(call "claim(std::size_t size" "publish_batch(")
  string(FIND "${producer}" "${call}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "producer.hpp has no ${call}")
  endif()
endforeach()
string(REGEX MATCH "\n\\| `claim\\(n, timeout\\)` \\+ `commit\\(\\)` \\| `\\[\\[nodiscard\\]\\] Claim`" claim_row "${readme}")
string(FIND "${producer}" "[[nodiscard]] Claim claim(" claim_at)
if(NOT claim_row OR claim_at EQUAL -1)
  message(FATAL_ERROR "${doc} and producer.hpp disagree on what claim() returns")
endif()

# C++20: the page says it, and the library requires it of its users.
string(FIND "${readme}" "C++20 compiler" cxx20)
# The library is packaged as shmbus_static and shmbus_shared (one function
# sets their usage requirements); shmbus::shmbus links one of them.
string(FIND "${lib_cmake}" "target_compile_features(\${target} PUBLIC cxx_std_20)" feature)
if(cxx20 EQUAL -1 OR feature EQUAL -1)
  message(FATAL_ERROR "${doc} must say C++20 is required, as libshmbus/CMakeLists.txt requires it")
endif()
# An outside project: install into a prefix, configure with CMAKE_PREFIX_PATH.
foreach(text "cmake --install build --prefix" "-DCMAKE_PREFIX_PATH=" "find_package(shmbus 0.4 REQUIRED)"
        "target_link_libraries(app PRIVATE shmbus::shmbus)")
  string(FIND "${readme}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${doc} does not show `${text}` for an outside project")
  endif()
endforeach()
message(STATUS "${doc}: API table and install instructions match the headers")
