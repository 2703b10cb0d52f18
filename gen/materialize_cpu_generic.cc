// CPU inner loops for the generic instruction set; compiled with its own flags
// (gen/CMakeLists.txt).
#define SEEDSTORE_CPU_ISA cpu_generic
#include "gen/checksum_kernels.inc"
#include "gen/materialize_cpu_kernels.inc"
