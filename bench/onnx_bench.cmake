# onnx_bench: MNIST / Silero VAD / PaddleOCR latency (docs/ONNX.md); compare with
# bench/onnx/ort_bench.mjs (onnxruntime-node).
add_executable(onnx_bench ${CMAKE_CURRENT_LIST_DIR}/onnx_bench.cpp)
target_link_libraries(onnx_bench PRIVATE power_onnx)
# onnx_batch_bench: VAD throughput of the ONNX service under concurrent callers, microbatched
# against unbatched (docs/ONNX.md "Microbatching").
add_executable(onnx_batch_bench ${CMAKE_CURRENT_LIST_DIR}/onnx_batch_bench.cpp)
target_link_libraries(onnx_batch_bench PRIVATE power_onnx_service)
