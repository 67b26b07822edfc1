# Warnings for hllm's own targets (tests, benchmarks, examples). Consumers never see these.
function(hllm_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
    -Wno-sign-conversion
    # Options structs are meant to be filled with designated initializers, leaving defaults.
    -Wno-missing-field-initializers)
endfunction()
