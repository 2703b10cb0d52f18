# Store benchmark (docs/PERF.md, "Store"): dense write/read vs a raw file, compression ratios.
# Run: build/venv/bin/python bench/store_bench.py (adds the safetensors package and lazy 70B).
add_executable(seedstore_store_bench ${CMAKE_CURRENT_SOURCE_DIR}/store_bench.cc)
target_link_libraries(seedstore_store_bench PRIVATE seedstore_io)
# libhdf5 alone writing the objects of a distributed save of many small pieces (docs/PERF.md,
# "Reshard"). Run: build/bench/seedstore_h5_floor [FILES] [PIECES_PER_FILE] [PIECE_BYTES] [DIR]
# [v1|packed].
add_executable(seedstore_h5_floor ${CMAKE_CURRENT_SOURCE_DIR}/h5_object_floor.cc)
target_include_directories(seedstore_h5_floor PRIVATE ${HDF5_C_INCLUDE_DIRS})
target_link_libraries(seedstore_h5_floor PRIVATE ${HDF5_C_LIBRARIES})
