# Warning and sanitizer flags. Warnings apply to ZRT's own targets through zrt_target_defaults();
# sanitizers apply to everything built in the tree (tests included) when ZRT_SANITIZE is on.

if(ZRT_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=address,undefined>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>)
  add_link_options(-fsanitize=address,undefined)
endif()

function(zrt_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wundef>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${ZRT_WERROR}>>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
endfunction()
