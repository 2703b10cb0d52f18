# Collectives (io/collective*.cc, issue 5). Included from io/CMakeLists.txt after seedstore_io.
# collective_mpi.cc compiles to a stub without MPI; collective_nccl.cc is empty unless
# SEEDSTORE_HAVE_NCCL, which is set here when CUDA, NCCL and MPI (the bootstrap) are found.
if(SEEDSTORE_HAVE_CUDA AND MPI_C_FOUND)
  find_path(SEEDSTORE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(SEEDSTORE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(SEEDSTORE_NCCL_INCLUDE_DIR AND SEEDSTORE_NCCL_LIBRARY)
    target_include_directories(seedstore_io PRIVATE ${SEEDSTORE_NCCL_INCLUDE_DIR})
    target_link_libraries(seedstore_io PUBLIC CUDA::cudart ${SEEDSTORE_NCCL_LIBRARY})
    target_compile_definitions(seedstore_io PRIVATE SEEDSTORE_HAVE_NCCL=1)
    message(STATUS "seedstore: NCCL backend ON (${SEEDSTORE_NCCL_LIBRARY})")
  else()
    message(STATUS "seedstore: NCCL backend OFF (nccl.h or libnccl not found)")
  endif()
endif()
# The CUDA paths of verification call the kernels library once it is a real library.
get_target_property(_seedstore_kernels_type seedstore_kernels TYPE)
if(NOT _seedstore_kernels_type STREQUAL "INTERFACE_LIBRARY")
  target_compile_definitions(seedstore_io PRIVATE SEEDSTORE_IO_HAS_KERNELS=1)
endif()
