# The tokenizer benchmark (bench/tokenizer_bench.cpp). Include from bench/CMakeLists.txt, under
# if(POWER_BUILD_BENCH):  include(${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_bench.cmake)
find_package(benchmark REQUIRED)
add_executable(tokenizer_bench ${CMAKE_CURRENT_LIST_DIR}/tokenizer_bench.cpp)
target_link_libraries(tokenizer_bench PRIVATE power_text benchmark::benchmark)
target_compile_definitions(tokenizer_bench PRIVATE POWER_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
