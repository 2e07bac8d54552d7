# mkc_embed_files(OUT ROOT FILES... COMMENT text): a build step writing OUT, the C++ fragment
# cmake/EmbedFiles.cmake makes of FILES (paths relative to ROOT), redone when one of them changes.
function(mkc_embed_files out root)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "COMMENT" "FILES")
  list(TRANSFORM arg_FILES PREPEND ${root}/ OUTPUT_VARIABLE paths)
  set(script ${PROJECT_SOURCE_DIR}/cmake/EmbedFiles.cmake)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DROOT=${root} "-DFILES=${arg_FILES}" -DOUT=${out} -P ${script}
    DEPENDS ${paths} ${script}
    COMMENT "${arg_COMMENT}"
    VERBATIM)
endfunction()
