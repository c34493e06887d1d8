# onnx_bench: MNIST / Silero VAD / PaddleOCR latency (docs/ONNX.md); compare with
# bench/onnx/ort_bench.mjs (onnxruntime-node).
add_executable(onnx_bench ${CMAKE_CURRENT_LIST_DIR}/onnx_bench.cpp)
target_link_libraries(onnx_bench PRIVATE power_onnx)
