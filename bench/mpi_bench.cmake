# Multi-rank benchmarks (docs/PERF.md, "verify-ranks"): bench/mpi_*.cc, each an MPI program
# (run under mpirun).
# Included from bench/CMakeLists.txt.
add_executable(seedstore_mpi_bench ${CMAKE_CURRENT_SOURCE_DIR}/mpi_verify_bench.cc)
target_link_libraries(seedstore_mpi_bench PRIVATE seedstore_io)
# verify-ranks at many simulated ranks in one process (a thread per rank, io/thread_world.h).
# Run: build/bench/seedstore_verify_ranks_scale [--preset P] [--layers N] [--ranks 8,1024].
add_executable(seedstore_verify_ranks_scale ${CMAKE_CURRENT_SOURCE_DIR}/verify_ranks_scale.cc)
target_link_libraries(seedstore_verify_ranks_scale PRIVATE seedstore_io)
