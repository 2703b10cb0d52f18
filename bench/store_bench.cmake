# Store benchmark (issue 3 item 9): dense write/read vs a raw file, compression ratios.
# Run: build/venv/bin/python bench/store_bench.py (adds the safetensors package and lazy 70B).
add_executable(seedstore_store_bench ${CMAKE_CURRENT_SOURCE_DIR}/store_bench.cc)
target_link_libraries(seedstore_store_bench PRIVATE seedstore_io)
