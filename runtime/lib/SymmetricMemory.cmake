# MkSymmetricMemory: the symmetric heap (VMM memory of every GPU of a node, mapped on each) and
# the Unix sockets over which the node's ranks pass its file descriptors.
add_library(MkSymmetricMemory STATIC ${PROJECT_SOURCE_DIR}/runtime/lib/NodeSockets.cpp
                                     ${PROJECT_SOURCE_DIR}/runtime/lib/SymmetricMemory.cpp)
# mk/abi.h lives with the device library: the heap fills the kernels' arguments.
target_include_directories(MkSymmetricMemory PUBLIC ${PROJECT_SOURCE_DIR}/runtime/include
                                                    ${PROJECT_SOURCE_DIR}/runtime/device)
target_link_libraries(MkSymmetricMemory PUBLIC MkCudaDriver)
