// CPU inner loops for the avx2 instruction set; compiled with its own flags (gen/CMakeLists.txt).
#define SEEDSTORE_CPU_ISA cpu_avx2
#include "gen/checksum_kernels.inc"
#include "gen/materialize_cpu_kernels.inc"
