# Multi-rank benchmarks (docs/PERF.md, "verify-ranks"): bench/mpi_*.cc, each an MPI program
# (run under mpirun).
# Included from bench/CMakeLists.txt.
add_executable(seedstore_mpi_bench ${CMAKE_CURRENT_SOURCE_DIR}/mpi_verify_bench.cc)
target_link_libraries(seedstore_mpi_bench PRIVATE seedstore_io)
