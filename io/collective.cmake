# Collectives (io/collective*.cc, io/nccl_comm.cc). Included from io/CMakeLists.txt after
# seedstore_io. collective_mpi.cc compiles to a stub without MPI. io/nccl_comm.cc has NCCL
# (SEEDSTORE_HAVE_NCCL) when CUDA, nccl.h and libnccl are found -- MPI is not needed: a world
# of one (tests/gpu/test_nccl_comm.cc) or a caller-given unique id need no bootstrap; under
# mpirun the MPI backend carries the unique id, under torchrun a key-value store through the
# Bootstrap seam (io/bootstrap.h). Without NCCL the NCCL factories return kUnsupported.
set(SEEDSTORE_HAVE_NCCL OFF)
if(SEEDSTORE_HAVE_CUDA)
  find_path(SEEDSTORE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(SEEDSTORE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64
               /usr/local/cuda/lib)
  if(SEEDSTORE_NCCL_INCLUDE_DIR AND SEEDSTORE_NCCL_LIBRARY)
    set(SEEDSTORE_HAVE_NCCL ON)
    target_include_directories(seedstore_io PRIVATE ${SEEDSTORE_NCCL_INCLUDE_DIR})
    target_link_libraries(seedstore_io PUBLIC CUDA::cudart ${SEEDSTORE_NCCL_LIBRARY})
    target_compile_definitions(seedstore_io PRIVATE SEEDSTORE_HAVE_NCCL=1)
    if(MPI_C_FOUND)
      message(STATUS "seedstore: NCCL backend ON (${SEEDSTORE_NCCL_LIBRARY}; bootstrap over MPI)")
    else()
      message(STATUS "seedstore: NCCL backend ON (${SEEDSTORE_NCCL_LIBRARY}; no MPI: one rank, "
                     "or a caller-given unique id)")
    endif()
  else()
    message(STATUS "seedstore: NCCL backend OFF (nccl.h or libnccl not found)")
  endif()
endif()
# The CUDA paths of verification call the kernels library once it is a real library.
get_target_property(_seedstore_kernels_type seedstore_kernels TYPE)
if(NOT _seedstore_kernels_type STREQUAL "INTERFACE_LIBRARY")
  target_compile_definitions(seedstore_io PRIVATE SEEDSTORE_IO_HAS_KERNELS=1)
endif()
