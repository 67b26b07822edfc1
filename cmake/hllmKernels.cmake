# hllm_add_kernels_library(<source-dir> <include-dir>): the static library hllm_kernels (alias
# hllm::kernels) holding every kernel and the kernel tables, so that no other translation unit
# of a program compiles them: hllm/implementation.hpp in four translation units, one part each
# (HLLM_KERNEL_PARTS, in <source-dir>), which a parallel build compiles side by side. hllm's
# CMakeLists.txt calls it for the build tree, and installs the parts beside this file; the
# installed hllmConfig.cmake calls it in the consumer's build, from the installed sources:
# nothing binary is installed.
#
# The kernels are compiled with -O2 in every configuration that does not optimise (Debug, or an
# empty CMAKE_BUILD_TYPE), after the configuration's flags (so -O2 wins, -g stays): a Debug
# build of a program then runs its kernels at full speed. Flags in CMAKE_CXX_FLAGS (sanitizers)
# reach this library as any other. HLLM_OPTIMIZE_KERNELS=OFF compiles them as the rest.
set(HLLM_KERNEL_PARTS hllm_kernels_scalar.cpp hllm_kernels_avx2.cpp hllm_kernels_avx512.cpp
  hllm_kernels_model.cpp)
function(hllm_add_kernels_library source_dir include_dir)
  list(TRANSFORM HLLM_KERNEL_PARTS PREPEND "${source_dir}/" OUTPUT_VARIABLE sources)
  add_library(hllm_kernels STATIC ${sources})
  add_library(hllm::kernels ALIAS hllm_kernels)
  target_compile_features(hllm_kernels PRIVATE cxx_std_20)
  target_include_directories(hllm_kernels PRIVATE ${include_dir})
  # A static library linked into shared objects too.
  set_target_properties(hllm_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(NOT DEFINED HLLM_OPTIMIZE_KERNELS OR HLLM_OPTIMIZE_KERNELS)
    target_compile_options(hllm_kernels PRIVATE
      $<$<NOT:$<CONFIG:Release,RelWithDebInfo,MinSizeRel>>:-O2>)
    get_property(multi_config GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
    if(multi_config)
      message(STATUS "hllm: kernels (hllm_kernels) compiled with -O2 in the configurations "
        "that do not optimise (Debug; -DHLLM_OPTIMIZE_KERNELS=OFF: as the rest)")
    elseif(NOT CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo|MinSizeRel)$")
      set(build_type "${CMAKE_BUILD_TYPE}")
      if(build_type STREQUAL "")
        set(build_type "none")
      endif()
      message(STATUS "hllm: kernels (hllm_kernels) compiled with -O2 in this ${build_type} "
        "build (-DHLLM_OPTIMIZE_KERNELS=OFF: as the rest)")
    endif()
  endif()
endfunction()
