# Man pages for the installed programs, generated at build time from the
# programs themselves, installed to man1: help2man (Debian's help2man) turns
# the top-level --help into the page, and cmake/man_include.sh adds a
# SUBCOMMANDS section with every subcommand's own --help and an EXIT STATUS
# section from the "Exit status:" block every --help ends with. Nothing in
# a page is written by hand, so a page cannot disagree with its program.
# Off when help2man is missing (SHMBUS_MAN_PAGES=AUTO) or when asked.
set(SHMBUS_MAN_PAGES AUTO CACHE STRING "Generate man pages with help2man: AUTO, ON or OFF")
if(SHMBUS_MAN_PAGES STREQUAL "OFF")
  return()
endif()
if(SHMBUS_MAN_PAGES STREQUAL "ON")
  find_program(HELP2MAN help2man REQUIRED)
else()
  find_program(HELP2MAN help2man)
  if(NOT HELP2MAN)
    message(STATUS "help2man not found: no man pages")
    return()
  endif()
endif()

set(shmbus_man_descriptions
  "shmbus-producer=publish messages to a shmbus shared-memory bus"
  "shmbus-consumer=read, print and verify the messages of a shmbus bus"
  "shmbus-inspect=look inside shmbus buses without disturbing them; metrics"
  "shmbus-bridge=forward a shmbus bus over TCP"
  "shmbus-nats=a shmbus bus into NATS JetStream and back")
set(shmbus_man_pages "")
foreach(entry IN LISTS shmbus_man_descriptions)
  string(REGEX MATCH "^[^=]+" program "${entry}")
  string(REGEX REPLACE "^[^=]+=" "" description "${entry}")
  if(NOT TARGET ${program})
    continue()
  endif()
  set(page ${PROJECT_BINARY_DIR}/man/${program}.1)
  set(include ${PROJECT_BINARY_DIR}/man/${program}.h2m)
  # help2man names the page after the program it runs: the wrapper has its name.
  set(wrapper ${PROJECT_BINARY_DIR}/man/run/${program})
  add_custom_command(OUTPUT ${page}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man/run
    COMMAND sh ${PROJECT_SOURCE_DIR}/cmake/man_include.sh $<TARGET_FILE:${program}> ${program} ${include} ${wrapper}
    COMMAND ${HELP2MAN} --no-info --no-discard-stderr --version-string=${PROJECT_VERSION}
      --name=${description} --section=1 --include=${include} --output=${page} ${wrapper}
    DEPENDS ${program} ${PROJECT_SOURCE_DIR}/cmake/man_include.sh
    COMMENT "help2man ${program}"
    VERBATIM)
  list(APPEND shmbus_man_pages ${page})
endforeach()
add_custom_target(shmbus_man_pages ALL DEPENDS ${shmbus_man_pages})
set(SHMBUS_HAVE_MAN_PAGES ON)
if(SHMBUS_INSTALL)
  install(FILES ${shmbus_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endif()
